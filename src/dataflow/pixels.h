/* pixels.h - 8-bit pixels to float32: torchvision's ToTensor (v / 255), then
 * Normalize's (x - mean) / std, for the sources that hold bytes (idx,
 * cifar10) and a leading normalize the dataflow folds in.
 *
 * Every element is the two IEEE divisions and the subtraction in that
 * order, at every instruction-set level (cpu_isa(): 16 lanes at AVX-512, 8 at
 * AVX2, one at a time in plain C): the same bits as dataset_byte_value and
 * augment.c's normalize one after the other. mean 0 and std 1 give v / 255
 * itself (x - 0 and x / 1 are x, -0 included). */
#ifndef TT_PIXELS_H
#define TT_PIXELS_H

#include <stddef.h>
#include <stdint.h>

/* x[k] = ((float)p[k] / 255 - mean) / std for k < n. */
void pixels_to_float(const uint8_t *p, size_t n, float mean, float std, float *x);

#endif
