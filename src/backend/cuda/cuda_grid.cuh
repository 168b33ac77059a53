/* cuda_grid.cuh - how towertrain's element-wise kernels cover n elements:
 * THREADS a block, at most MAX_BLOCKS blocks, and a grid-stride loop over
 * the rest (cuda_kernels.cu, cuda_nhwc_kernels.cu). */
#ifndef TT_CUDA_GRID_CUH
#define TT_CUDA_GRID_CUH

#include <stddef.h>

#define THREADS 256
#define MAX_BLOCKS 65535

/* Blocks for n elements with grid-stride loops. */
static inline unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

#define FOR_EACH(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)blockDim.x * gridDim.x)

#endif
