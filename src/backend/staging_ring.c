/* staging_ring.c - the two-slot state machine of staging_ring.h. */
#include "backend/staging_ring.h"

void staging_ring_init(staging_ring *r)
{
    for (int s = 0; s < 2; s++) {
        r->state[s] = SLOT_FREE;
        r->step[s] = -1;
        r->copied[s] = false;
        r->consumed[s] = false;
    }
    r->next = 0;
}

int staging_ring_fill(staging_ring *r, int64_t step, bool *host_wait, bool *copy_wait)
{
    /* slots alternate; when the next one is busy, the other may be free
     * (after a drop or a release out of order) */
    int s = r->next;
    if (r->state[s] != SLOT_FREE)
        s = 1 - s;
    if (r->state[s] != SLOT_FREE)
        return -1;
    *host_wait = r->copied[s];
    *copy_wait = r->consumed[s];
    r->state[s] = SLOT_LOADED;
    r->step[s] = step;
    r->copied[s] = true;
    r->next = 1 - s;
    return s;
}

int staging_ring_take(staging_ring *r, int64_t step)
{
    for (int s = 0; s < 2; s++)
        if (r->state[s] == SLOT_LOADED && r->step[s] == step) {
            r->state[s] = SLOT_IN_USE;
            return s;
        }
    return -1;
}

int staging_ring_release(staging_ring *r, int slot)
{
    if (slot < 0 || slot > 1 || r->state[slot] != SLOT_IN_USE)
        return -1;
    r->state[slot] = SLOT_FREE;
    r->consumed[slot] = true;
    return 0;
}

void staging_ring_drop(staging_ring *r)
{
    for (int s = 0; s < 2; s++)
        if (r->state[s] == SLOT_LOADED) {
            r->state[s] = SLOT_FREE;
            r->step[s] = -1;
        }
}
