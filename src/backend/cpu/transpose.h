/* transpose.h - 16 x 16 float tiles transposed (transpose.c): the packing of
 * tile_gemm.c and the batch-in-lanes layout of conv_small.c. */
#ifndef TT_TRANSPOSE_H
#define TT_TRANSPOSE_H

#include <stddef.h>

/* src: `rows` rows of `cols` floats, row i at src + i * ld (rows, cols <= 16;
 * the rest of the 16 x 16 tile reads as zero). dst: row j (j < cols) at
 * dst + j * ldd gets column j of the tile, its first `width` floats stored
 * (width <= 16: the zeros past `rows` are stored only when width says so). */
void cpu_transpose16(const float *src, ptrdiff_t ld, int rows, int cols, float *dst,
                     ptrdiff_t ldd, int width);

#endif
