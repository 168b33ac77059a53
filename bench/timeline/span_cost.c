/* span_cost.c - what one span costs a hook, recording and not (util/trace.h).
 *
 *   cc -O2 -std=c11 -I../../src span_cost.c ../../libtowertrain.a -lpthread -o span_cost
 * usage: span_cost [SPANS]   prints "off <ns> on <ns>": nanoseconds per span
 * (trace_begin + trace_end_full) with recording off and on, the best of 5. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util/trace.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void args(trace_text *b, const void *obj, int64_t n)
{
    trace_text_printf(b, "\"n\": %lld", (long long)n);
}

/* ns per span over n spans on the trainer row; the row restarts before it fills */
static double run(long n, int recording)
{
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        if (recording)
            trace_start();
        else
            trace_stop();
        double t = now();
        for (long i = 0; i < n; i++) {
            if (recording && i % 60000 == 59999)
                trace_start(); /* not timed apart: one reset in 60000 spans */
            int64_t t0 = trace_begin();
            if (t0 != 0)
                trace_end_full(TRACE_ROW_TRAINER, t0, TRACE_CAT_FORWARD, "layer", -1,
                               "forward", args, NULL, i);
        }
        double ns = (now() - t) * 1e9 / (double)n;
        best = ns < best ? ns : best;
    }
    trace_stop();
    return best;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    if (n < 1) {
        fprintf(stderr, "usage: %s [SPANS]\n", argv[0]);
        return 2;
    }
    printf("off %.2f on %.2f\n", run(n, 0), run(n, 1));
    return 0;
}
