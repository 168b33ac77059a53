/* param_spec.c - what the layer files share to declare and initialise
 * their parameters (layer.h). Apart from layer.c, the registry that calls
 * into every layer file, so that no two files call each other. */
#include <stdio.h>
#include <string.h>

#include "layers/layer.h"

void param_spec_set(param_spec *p, const char *suffix, int ndim, const int *dims, bool trainable)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->suffix, sizeof(p->suffix), "%s", suffix);
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < ndim; i++) {
        p->dims[i] = dims[i];
        p->count *= (size_t)dims[i];
    }
    p->trainable = trainable;
}

void init_uniform(rng_t *rng, float *p, size_t count, float bound)
{
    for (size_t i = 0; i < count; i++)
        p[i] = rng_uniform_range(rng, -bound, bound);
}
