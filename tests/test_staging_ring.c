/* test_staging_ring.c - the GPU tower's double-buffered input
 * (src/backend/cuda/staging_ring.c) on the CPU: slots alternate, the next
 * batch loads while the current one is in use, and every reuse of a slot
 * reports the wait that keeps the copy and the compute apart. A simulated
 * device checks the waits: a copy into a slot a step still reads, or a host
 * write into a pinned buffer a copy still reads, is an error. */
#include <stdbool.h>
#include <stdint.h>

#include "backend/staging_ring.h"
#include "tt_test.h"

static void test_sequence(void)
{
    staging_ring r;
    staging_ring_init(&r);
    bool hw, cw;
    int s0 = staging_ring_fill(&r, 0, &hw, &cw);
    tt_ok(s0 == 0 && !hw && !cw, "first fill: slot 0, nothing to wait for");
    tt_ok(staging_ring_take(&r, 0) == 0, "take step 0: slot 0");
    int s1 = staging_ring_fill(&r, 1, &hw, &cw);
    tt_ok(s1 == 1 && !hw && !cw, "the next batch loads into slot 1 while slot 0 is in use");
    tt_ok(staging_ring_fill(&r, 2, &hw, &cw) == -1, "a third batch has no slot: -1");
    tt_ok(staging_ring_release(&r, 0) == 0, "release slot 0");
    tt_ok(staging_ring_take(&r, 1) == 1, "take step 1: slot 1");
    int s2 = staging_ring_fill(&r, 2, &hw, &cw);
    tt_ok(s2 == 0 && hw && cw, "step 2 reuses slot 0: the host waits for its last copy, the "
          "copy stream for its consumed event");
    tt_ok(staging_ring_take(&r, 3) == -1, "taking a step not loaded: -1");
    tt_ok(staging_ring_release(&r, 0) == -1, "releasing a slot not in use: -1");
    tt_ok(staging_ring_release(&r, 5) == -1 && staging_ring_release(&r, -1) == -1,
          "releasing a slot that does not exist: -1");
    staging_ring_drop(&r);
    tt_ok(r.state[0] == SLOT_FREE && r.state[1] == SLOT_IN_USE,
          "drop frees the loaded slot, not the one in use");
    tt_ok(staging_ring_take(&r, 2) == -1, "a dropped batch cannot be taken");
    tt_ok(staging_ring_fill(&r, 7, &hw, &cw) == 0, "after a drop the freed slot is filled");
}

/* A simulated device: the copy into a slot and the step reading it are
 * intervals on two streams. The copy stream runs a copy when it is queued,
 * unless told to wait for the slot's consumed event, in which case it starts
 * after the step that last read the slot; the compute stream starts a step
 * after its copy. Each step takes `compute` time units, each copy `copy`. */
static void test_simulated_overlap(int compute, int copy)
{
    staging_ring r;
    staging_ring_init(&r);
    double copy_free = 0, compute_free = 0;       /* when each stream is idle */
    double copy_end[2] = {0, 0}, read_end[2] = {0, 0};
    double host = 0;                              /* the host's clock */
    int violations = 0, steps = 50;
    double overlapped = 0;
    bool hw, cw;
    for (int64_t s = 0; s < steps; s++) {
        int slot = staging_ring_fill(&r, s, &hw, &cw);
        if (slot < 0) {
            violations++;
            break;
        }
        if (hw && host < copy_end[slot])
            host = copy_end[slot];               /* cudaEventSynchronize(copy event) */
        /* the host writes the pinned buffer now: a copy still reading it is a race */
        if (host < copy_end[slot])
            violations++;
        double start = host > copy_free ? host : copy_free;
        if (cw && start < read_end[slot])
            start = read_end[slot];              /* cudaStreamWaitEvent(consumed) */
        if (start < read_end[slot])
            violations++;                        /* overwrote what a step reads */
        copy_end[slot] = start + copy;
        copy_free = copy_end[slot];
        int t = staging_ring_take(&r, s);
        if (t != slot) {
            violations++;
            break;
        }
        double cstart = compute_free > copy_end[slot] ? compute_free : copy_end[slot];
        if (cstart < copy_end[slot])
            violations++;
        if (start < compute_free) /* this copy ran while the previous step computed */
            overlapped += (compute_free < copy_end[slot] ? compute_free : copy_end[slot]) - start;
        read_end[slot] = cstart + compute;
        compute_free = read_end[slot];
        staging_ring_release(&r, slot);
        host += 1; /* queuing a step costs the host little: it runs ahead */
    }
    tt_ok(violations == 0, "simulated device, step %d, copy %d: no copy overwrites a slot in "
          "use, no host write races a copy (%d violations)", compute, copy, violations);
    tt_ok(overlapped > 0.5 * (steps - 2) * (copy < compute ? copy : compute),
          "copies overlap the previous step (overlap %.0f of %d copies x %d)", overlapped,
          steps, copy);
}

int main(void)
{
    test_sequence();
    test_simulated_overlap(10, 3);
    test_simulated_overlap(3, 10);
    return tt_done();
}
