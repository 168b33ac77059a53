/* roof.h - the machine's fp32 roof for `towertrain profile`: the best large
 * square sgemm with every core, as bench/roofline/sgemm_roof.c measures it,
 * cached per CPU model. */
#ifndef TT_ROOF_H
#define TT_ROOF_H

#include <stddef.h>

/* GFLOP/s of the best of three N = 3072 sgemm calls (one untimed first),
 * the rows of C split over one thread per core, each calling the CPU
 * backend's sgemm (oneDNN or CBLAS). Read from, or written to,
 * $XDG_CACHE_HOME/towertrain (else ~/.cache/towertrain) under a name made of
 * the CPU model, the cores and the library; from_cache says which, and
 * where receives the cache file's path ("" when there is none). A cached
 * value below at_least (GFLOP/s something was seen to run at: a roof
 * measured while the machine was busy) is measured again, and the cache
 * keeps the higher. Returns 0 when the measurement fails (out of memory). */
double roof_fp32_gflops(int *cores, int *from_cache, char *where, size_t where_len,
                        double at_least);

#endif
