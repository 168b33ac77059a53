/* sumsq_plan.c - the sum of squares' split into partial sums
 * (sumsq_plan.h). */
#include "backend/cuda/sumsq_plan.h"

_Static_assert(TT_SUMSQ_SCRATCH_DOUBLES >= TT_SUMSQ_MAX_PARTS,
               "a range's partials fit the scratch");

tt_sumsq_range tt_sumsq_plan(const float *x, size_t count)
{
    tt_sumsq_range a = {x, count, 0, 0, 0};
    if (count == 0)
        return a;
    size_t want = (count + TT_SUMSQ_MIN_CHUNK - 1) / TT_SUMSQ_MIN_CHUNK;
    if (want > TT_SUMSQ_MAX_PARTS)
        want = TT_SUMSQ_MAX_PARTS;
    a.chunk = (count + want - 1) / want;
    a.parts = (int)((count + a.chunk - 1) / a.chunk); /* want: chunk >= 4096 > want */
    return a;
}

int tt_sumsq_group(int n, const float *const *x, const size_t *count, int room,
                   tt_sumsq_range *r)
{
    int k = 0, used = 0;
    while (k < n) {
        tt_sumsq_range a = tt_sumsq_plan(x[k], count[k]);
        if (k > 0 && a.parts > room - used)
            break;
        a.first = used;
        used += a.parts;
        r[k++] = a;
    }
    return k;
}
