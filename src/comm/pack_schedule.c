/* pack_schedule.c - pack ranges and the last-first start order. */
#include "comm/pack_schedule.h"

void pack_schedule_init(pack_schedule *s, size_t count, int packs, size_t align)
{
    s->count = count;
    s->align = align > 0 ? align : 1;
    size_t units = (count + s->align - 1) / s->align; /* aligned units in the block */
    if (packs < 1)
        packs = 1;
    if (units < (size_t)packs)
        packs = units > 0 ? (int)units : 1;
    s->packs = packs;
    s->pending = 0;
}

/* The start of pack k: an even share of the aligned units. */
static size_t pack_start(const pack_schedule *s, int k)
{
    if (k >= s->packs)
        return s->count;
    size_t units = (s->count + s->align - 1) / s->align;
    size_t lo = units * (size_t)k / (size_t)s->packs * s->align;
    return lo < s->count ? lo : s->count;
}

void pack_schedule_range(const pack_schedule *s, int k, size_t *lo, size_t *hi)
{
    *lo = pack_start(s, k);
    *hi = pack_start(s, k + 1);
}

void pack_schedule_begin(pack_schedule *s)
{
    s->pending = s->packs;
}

int pack_schedule_ready(pack_schedule *s, size_t lo, int *top)
{
    *top = s->pending - 1;
    int n = 0;
    while (s->pending > 0 && pack_start(s, s->pending - 1) >= lo) {
        s->pending--;
        n++;
    }
    return n;
}
