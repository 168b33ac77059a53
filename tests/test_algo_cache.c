/* test_algo_cache.c - the convolution algorithm cache of the CUDA backend
 * (src/backend/cuda/algo_cache.c) on the CPU: which timed candidate is
 * chosen under the deterministic / tf32 / workspace rules, and that a choice
 * is found again for exactly the key it was stored under. */
#include <string.h>

#include "backend/cuda/algo_cache.h"
#include "tt_test.h"

static void test_pick(void)
{
    /* as cudnnFind*AlgorithmEx reports them, fastest first */
    algo_perf r[] = {
        {.algo = 7, .ok = false, .time_ms = 0.01f},                       /* failed */
        {.algo = 6, .ok = true, .time_ms = 0.10f, .memory = 1 << 30,
         .deterministic = true, .tensor_math = false},                    /* too big */
        {.algo = 5, .ok = true, .time_ms = 0.20f, .memory = 4096,
         .deterministic = false, .tensor_math = true},                    /* tf32, nondet */
        {.algo = 4, .ok = true, .time_ms = 0.30f, .memory = 4096,
         .deterministic = false, .tensor_math = false},                   /* nondet */
        {.algo = 3, .ok = true, .time_ms = 0.40f, .memory = 0,
         .deterministic = true, .tensor_math = true},                     /* tf32, det */
        {.algo = 1, .ok = true, .time_ms = 0.90f, .memory = 0,
         .deterministic = true, .tensor_math = false},                    /* det fma */
    };
    int n = (int)(sizeof(r) / sizeof(r[0]));
    size_t lim = 1 << 20;
    tt_ok(r[algo_pick(r, n, false, true, lim)].algo == 5,
          "fastest: a failed candidate and one over the workspace limit are skipped");
    tt_ok(r[algo_pick(r, n, false, false, lim)].algo == 4,
          "tf32 = false: no tensor-core math");
    tt_ok(r[algo_pick(r, n, true, true, lim)].algo == 3, "deterministic: only deterministic ones");
    tt_ok(r[algo_pick(r, n, true, false, lim)].algo == 1, "deterministic and no tf32");
    tt_ok(r[algo_pick(r, n, false, false, (size_t)2 << 30)].algo == 6,
          "a larger workspace limit admits the big one");
    tt_ok(algo_pick(r, 1, false, true, lim) == -1 && algo_pick(r, 0, false, true, lim) == -1,
          "none qualifies: -1");
    /* cuDNN's order decides (a heuristic ranking carries no times) */
    algo_perf s[] = {r[5], r[3]};
    tt_ok(s[algo_pick(s, 2, false, false, lim)].algo == 1, "cuDNN's order decides, not the "
          "reported time");
}

static void test_cache(void)
{
    window_desc d = {.n = 32, .c = 3, .h = 32, .w = 32, .f = 16, .k = 3, .stride = 1, .pad = 1,
                     .oh = 32, .ow = 32};
    algo_cache *c = algo_cache_create();
    algo_key k = algo_key_make(CONV_PASS_FORWARD, &d, false, true);
    tt_ok(algo_cache_find(c, &k) == NULL && algo_cache_size(c) == 0, "empty cache: no choice");
    algo_choice ch = {.algo = 1, .math_type = 3, .ws_bytes = 1234, .time_ms = 0.5f};
    tt_ok(algo_cache_put(c, &k, &ch) == 0, "put");
    const algo_choice *got = algo_cache_find(c, &k);
    tt_ok(got != NULL && got->algo == 1 && got->ws_bytes == 1234 && got->math_type == 3,
          "the same key finds the choice");

    /* every field of the key matters */
    int misses = 0, total = 0;
    for (int field = 0; field < 11; field++) {
        window_desc e = d;
        bool tf32 = false, det = true;
        conv_pass pass = CONV_PASS_FORWARD;
        switch (field) {
        case 0: e.n = 31; break;
        case 1: e.c = 4; break;
        case 2: e.h = 31; break;
        case 3: e.w = 31; break;
        case 4: e.f = 8; break;
        case 5: e.k = 5; break;
        case 6: e.stride = 2; break;
        case 7: e.pad = 0; break;
        case 8: tf32 = true; break;
        case 9: det = false; break;
        case 10: pass = CONV_PASS_BACKWARD_FILTER; break;
        }
        algo_key other = algo_key_make(pass, &e, tf32, det);
        total++;
        misses += algo_cache_find(c, &other) == NULL;
    }
    tt_ok(misses == total, "a key differing in any one field (batch, channels, size, filters, "
          "kernel, stride, padding, tf32, deterministic, pass) misses (%d of %d)", misses, total);

    /* many shapes: growth keeps every entry */
    int ok = 1;
    for (int i = 0; i < 200; i++) {
        window_desc e = d;
        e.n = 1 + i;
        algo_key ki = algo_key_make((conv_pass)(i % 3), &e, false, true);
        algo_choice ci = {.algo = i, .ws_bytes = (size_t)i * 10};
        ok &= algo_cache_put(c, &ki, &ci) == 0;
    }
    for (int i = 0; i < 200; i++) {
        window_desc e = d;
        e.n = 1 + i;
        algo_key ki = algo_key_make((conv_pass)(i % 3), &e, false, true);
        const algo_choice *g = algo_cache_find(c, &ki);
        ok &= g != NULL && g->algo == i && g->ws_bytes == (size_t)i * 10;
    }
    tt_ok(ok && algo_cache_size(c) == 201, "200 more shapes stored and found (size %d)",
          algo_cache_size(c));
    algo_choice again = {.algo = 9, .ws_bytes = 99};
    algo_cache_put(c, &k, &again);
    got = algo_cache_find(c, &k);
    tt_ok(algo_cache_size(c) == 201 && got != NULL && got->algo == 9,
          "putting a stored key replaces its choice, no duplicate");
    algo_cache_free(c);
}

int main(void)
{
    test_pick();
    test_cache();
    return tt_done();
}
