/* clock.h - the one clock every timer reads: timeouts, waits, spans and
 * rates are all CLOCK_MONOTONIC (never the wall clock, which NTP steps). */
#ifndef TT_CLOCK_H
#define TT_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary start (the machine's boot). */
static inline int64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same in microseconds (the bench's unit, as nccl-tests prints). */
static inline double clock_us(void)
{
    return (double)clock_ns() * 1e-3;
}

/* The same in seconds (exact to the nanosecond for 104 days of uptime). */
static inline double clock_s(void)
{
    return (double)clock_ns() * 1e-9;
}

#endif
