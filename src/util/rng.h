/* rng.h - small deterministic random numbers.
 *
 * Everything random in towertrain (initialisation, shuffling, augmentation,
 * dropout) is a pure function of the job seed and a few counters, so the same job
 * gives the same bits whatever the number of threads, and a resumed run finds its
 * place from global_step alone. splitmix64 (Steele, Lea, Flood 2014) serves both as
 * a hash of counters and as a stream generator: its state is one uint64_t.
 */
#ifndef TT_RNG_H
#define TT_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} rng_t;

static inline uint64_t rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A well-mixed hash of up to three counters: rng_hash3(seed, pass, index). */
static inline uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = rng_mix64(a + 0x9e3779b97f4a7c15ULL);
    h = rng_mix64(h ^ (b + 0x632be59bd9b4e019ULL));
    return rng_mix64(h ^ (c + 0x85ebca77c2b2ae63ULL));
}

static inline rng_t rng_make(uint64_t a, uint64_t b, uint64_t c)
{
    rng_t r = {rng_hash3(a, b, c)};
    return r;
}

static inline uint64_t rng_next(rng_t *r)
{
    r->state += 0x9e3779b97f4a7c15ULL;
    return rng_mix64(r->state);
}

/* Uniform in [0, 1) with 24 random bits: exactly representable as float. */
static inline float rng_uniform(rng_t *r)
{
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform in [lo, hi). */
static inline float rng_uniform_range(rng_t *r, float lo, float hi)
{
    return lo + (hi - lo) * rng_uniform(r);
}

/* Uniform integer in [0, n), n > 0, without modulo bias worth caring about
 * (Lemire's multiply-shift on 32 bits). */
static inline uint32_t rng_below(rng_t *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

#endif
