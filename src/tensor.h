/* tensor.h - shapes. No device knowledge: data pointers belong to a backend.
 *
 * Activations are NCHW float32. A shape here is per sample (C, H, W); the batch
 * dimension N is carried separately, since it is the one that varies (the last,
 * partial validation batch).
 */
#ifndef TT_TENSOR_H
#define TT_TENSOR_H

#include <stddef.h>

typedef struct {
    int c, h, w; /* a flat vector of n elements is {n, 1, 1} */
} shape3;

static inline size_t shape3_size(shape3 s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

static inline shape3 shape3_make(int c, int h, int w)
{
    shape3 s = {c, h, w};
    return s;
}

#endif
