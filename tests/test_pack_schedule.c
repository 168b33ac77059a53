/* test_pack_schedule.c - the all-reduce pack schedule (src/comm/pack_schedule.c):
 * packs tile the gradient block on aligned boundaries, start last first,
 * each exactly once per step, never before backward has made them final,
 * for random models (layer boundaries) and any number of packs. */
#include <stdint.h>

#include "comm/pack_schedule.h"
#include "tt_test.h"

static uint64_t rng = 88172645463325252ULL;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Ranges cover [0, count) in order, without gaps or overlap, on aligned
 * boundaries, none empty. */
static int check_tiling(const pack_schedule *s)
{
    size_t expect = 0;
    for (int k = 0; k < s->packs; k++) {
        size_t lo, hi;
        pack_schedule_range(s, k, &lo, &hi);
        if (lo != expect || hi <= lo || (lo % s->align) != 0 ||
            (hi != s->count && hi % s->align != 0))
            return 0;
        expect = hi;
    }
    return expect == s->count;
}

static void test_small(void)
{
    pack_schedule s;
    pack_schedule_init(&s, 1000, 4, 64);
    size_t lo, hi;
    pack_schedule_range(&s, 0, &lo, &hi);
    int ok = lo == 0 && hi == 256;
    pack_schedule_range(&s, 3, &lo, &hi);
    ok &= lo == 768 && hi == 1000;
    tt_ok(ok && check_tiling(&s), "1000 floats (16 units of 64) in 4 packs: [0,256) .. "
          "[768,1000)");
    pack_schedule_init(&s, 100, 8, 64);
    tt_ok(s.packs == 2 && check_tiling(&s), "100 floats hold 2 aligned units: 8 packs become 2");
    pack_schedule_init(&s, 10, 3, 64);
    tt_ok(s.packs == 1 && check_tiling(&s), "10 floats: one pack");
    pack_schedule_init(&s, 0, 3, 64);
    tt_ok(s.packs == 1, "an empty block: one (empty) pack");

    pack_schedule_init(&s, 1000, 4, 64);
    pack_schedule_begin(&s);
    int top, n;
    n = pack_schedule_ready(&s, 900, &top);
    tt_ok(n == 0, "[900, 1000) final: pack 3 starts at 768, not ready");
    n = pack_schedule_ready(&s, 768, &top);
    tt_ok(n == 1 && top == 3, "[768, 1000) final: pack 3 starts");
    n = pack_schedule_ready(&s, 300, &top);
    tt_ok(n == 1 && top == 2, "[300, ..) final: pack 2 (from 512) starts, pack 1 (from 256) "
          "not yet");
    n = pack_schedule_ready(&s, 0, &top);
    tt_ok(n == 2 && top == 1, "the end of backward starts packs 1 and 0 together");
    n = pack_schedule_ready(&s, 0, &top);
    tt_ok(n == 0, "nothing starts twice in a step");
}

static void test_random(void)
{
    int bad_tiling = 0, bad_order = 0, early = 0, missed = 0, trials = 2000;
    for (int t = 0; t < trials; t++) {
        size_t count = 1 + next() % 200000;
        int packs = 1 + (int)(next() % 40);
        size_t align = (next() % 3 == 0) ? 1 : 64;
        pack_schedule s;
        pack_schedule_init(&s, count, packs, align);
        bad_tiling += !check_tiling(&s);
        /* a random model: layers own contiguous ranges; backward reports the
         * layers' starts from the last layer to the first, some layers with
         * no parameters (the same lo reported twice) */
        int layers = 1 + (int)(next() % 30);
        size_t bounds[32];
        bounds[0] = 0;
        for (int l = 1; l < layers; l++)
            bounds[l] = next() % count;
        for (int a = 1; a < layers; a++) /* sort */
            for (int b = a; b > 0 && bounds[b] < bounds[b - 1]; b--) {
                size_t x = bounds[b];
                bounds[b] = bounds[b - 1];
                bounds[b - 1] = x;
            }
        int started[64] = {0};
        int expect_next = s.packs - 1;
        for (int step = 0; step < 2; step++) {
            pack_schedule_begin(&s);
            for (int k = 0; k < s.packs; k++)
                started[k] = 0;
            expect_next = s.packs - 1;
            for (int l = layers - 1; l >= -1; l--) {
                size_t lo = l >= 0 ? bounds[l] : 0; /* -1: the end of backward */
                int top, n = pack_schedule_ready(&s, lo, &top);
                for (int i = 0; i < n; i++) {
                    int k = top - i;
                    size_t plo, phi;
                    pack_schedule_range(&s, k, &plo, &phi);
                    if (k != expect_next)
                        bad_order++;
                    expect_next = k - 1;
                    if (plo < lo)
                        early++;
                    started[k]++;
                }
            }
            for (int k = 0; k < s.packs; k++)
                missed += started[k] != 1;
        }
    }
    tt_ok(bad_tiling == 0, "%d random blocks: packs tile [0, count) on aligned boundaries "
          "(%d bad)", trials, bad_tiling);
    tt_ok(bad_order == 0, "packs start last first, none skipped (%d out of order)", bad_order);
    tt_ok(early == 0, "no pack starts before its gradients are final (%d early)", early);
    tt_ok(missed == 0, "every pack starts exactly once per step, two steps each (%d wrong)",
          missed);
}

int main(void)
{
    test_small();
    test_random();
    return tt_done();
}
