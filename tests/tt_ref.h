/* tt_ref.h - what the numerical tests share to check the code against their
 * own references: a private random stream, float64 copies, the norm-wise
 * relative error, bit equality, copies to and from a backend's memory, a CPU
 * backend, and the python3 to run (with torch, for instance).
 *
 * The random stream is xorshift64, written here rather than taken from
 * util/rng.h, so that the inputs of a test do not change (or degenerate) with
 * the code under test. Everything is static inline, as in tt_test.h: each test
 * program is one translation unit.
 */
#ifndef TT_REF_H
#define TT_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tt_test.h"

/* ---- a private random stream ---- */

typedef struct {
    uint64_t s;
} tt_rng;

/* Any seed, 0 included: splitmix64 spreads it into a non-zero state. */
static inline tt_rng tt_rng_make(uint64_t seed)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    tt_rng r = {z != 0 ? z : 1};
    return r;
}

/* Uniform in [lo, hi), from 53 random bits. */
static inline double tt_uniform(tt_rng *r, double lo, double hi)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return lo + (hi - lo) * (double)(r->s >> 11) / 9007199254740992.0;
}

/* Uniform in [0, n). */
static inline int tt_below(tt_rng *r, int n)
{
    int k = (int)tt_uniform(r, 0.0, (double)n);
    return k < n ? k : n - 1;
}

static inline void tt_fill(tt_rng *r, float *p, size_t count, double lo, double hi)
{
    for (size_t i = 0; i < count; i++)
        p[i] = (float)tt_uniform(r, lo, hi);
}

/* ---- comparisons ---- */

/* A malloc'd float64 copy (the input of a float64 reference). */
static inline double *tt_to_double(const float *p, size_t count)
{
    double *d = malloc((count ? count : 1) * sizeof(double));
    if (d == NULL) {
        perror("tt_to_double");
        exit(99);
    }
    for (size_t i = 0; i < count; i++)
        d[i] = p[i];
    return d;
}

/* max |a - ref| / max |ref| over the tensor: a norm-wise relative error, so
 * that small components of a large tensor do not dominate. A NaN in a counts
 * as the worst error (it fails every "err < tol"); an all-zero ref leaves the
 * absolute error over 1e-30. */
static inline double tt_rel_err(const float *a, const double *ref, size_t count)
{
    double diff = 0.0, scale = 1e-30;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= diff))
            diff = d;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    return diff / scale;
}

/* The same against a float reference (another run, torch's float32). */
static inline double tt_rel_err_f(const float *a, const float *ref, size_t count)
{
    double diff = 0.0, scale = 1e-30;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= diff))
            diff = d;
        if (fabs((double)ref[i]) > scale)
            scale = fabs((double)ref[i]);
    }
    return diff / scale;
}

/* The same bits (two NULLs: nothing to compare, equal). */
static inline bool tt_same_bits(const float *a, const float *b, size_t count)
{
    if (a == NULL || b == NULL)
        return a == b;
    return memcmp(a, b, count * sizeof(float)) == 0;
}

/* The input pixel (*iy, *ix) that tap (ky, kx) of output pixel (oy, ox)
 * of window d reads; false where it lies in the padding. */
static inline bool tt_window_tap(const window_desc *d, int oy, int ox, int ky, int kx, int *iy,
                                 int *ix)
{
    *iy = oy * d->stride - d->pad + ky;
    *ix = ox * d->stride - d->pad + kx;
    return *iy >= 0 && *iy < d->h && *ix >= 0 && *ix < d->w;
}

/* ---- backends ---- */

/* A CPU backend of `threads` threads, or NULL with a diagnostic. */
static inline backend_t *tt_cpu_backend(int threads)
{
    tt_err err;
    err_clear(&err);
    backend_t *be = backend_cpu_create(0, threads, &err);
    if (be == NULL)
        tt_diag("backend_cpu_create(%d threads): %s", threads, err.msg);
    return be;
}

/* A device block of `bytes` (at least 4), holding a copy of host when given. */
static inline void *tt_dev_copy(backend_t *be, const void *host, size_t bytes)
{
    void *d = be->alloc(be, bytes ? bytes : 4);
    if (d == NULL) {
        fprintf(stderr, "tt_dev_copy: out of device memory (%zu bytes)\n", bytes);
        exit(99);
    }
    if (host != NULL && bytes > 0)
        be->upload(be, d, host, bytes);
    return d;
}

/* A malloc'd host copy of `bytes` of a device block. */
static inline void *tt_host_copy(backend_t *be, const void *dev, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 4);
    if (h == NULL) {
        perror("tt_host_copy");
        exit(99);
    }
    if (bytes > 0)
        be->download(be, h, dev, bytes);
    return h;
}

/* ---- python3 ---- */

/* The python3 the tests use, when it can import `modules` ("json, struct",
 * "torch"): $PYTHON3 (make check passes configure's, found in /usr/bin
 * first: Debian's python3-torch and numpy are there), else /usr/bin/python3.
 * NULL when neither can. The answer is a static buffer. */
static inline const char *tt_python(const char *modules)
{
    static char found[512];
    const char *env = getenv("PYTHON3");
    const char *cands[2] = {env != NULL && env[0] != '\0' ? env : NULL, "/usr/bin/python3"};
    for (int i = 0; i < 2; i++) {
        if (cands[i] == NULL || strchr(cands[i], '\'') != NULL)
            continue;
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "'%s' -c 'import %s' >/dev/null 2>&1", cands[i], modules);
        if (system(cmd) == 0) {
            snprintf(found, sizeof(found), "%s", cands[i]);
            return found;
        }
    }
    return NULL;
}

/* ---- bf16, in the tests' own words (the one reference every bf16 test
 *      checks the backend's rounding against) ---- */

/* The float whose upper half is h */
static inline float tt_bf16_widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* f to the nearer of its two bf16 neighbours (toward and away from zero),
 * the even one on a tie: by distance in double, not by the backend's carry
 * trick (bf16_io.h); a NaN to the quiet NaN of its sign and payload's top
 * bits */
static inline uint16_t tt_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40u);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dlo = fabs((double)f - tt_bf16_widen(lo));
    double dhi = fabs((double)tt_bf16_widen(hi) - f);
    return dlo < dhi || (dlo == dhi && lo % 2 == 0) ? lo : hi;
}

#endif
