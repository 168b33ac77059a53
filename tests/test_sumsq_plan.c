/* test_sumsq_plan.c - the CUDA backend's sum of squares (the optimizer's
 * norms) splits its ranges into partial sums (sumsq_plan.h) so that, with
 * the kernels' loops run here on integers through the same
 * __host__ __device__ positions (tt_sumsq_find, tt_sumsq_span_of): every
 * element of every range is read exactly once, by a block of its own
 * range's partial; each range's merged sum is exact; the partials of a
 * group stay inside the scratch; a list too large for the scratch goes in
 * groups that take every range once; and the split is a function of the
 * count alone. Shapes: every count up to 20,000, ResNet-50's 161
 * parameters and their gradients as LARS lists them (64x3x7x7 to
 * 2048x1000), one element, empty ranges, and counts past 2^31 and 2^32
 * (those by each partial's bounds, not element by element). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/sumsq_plan.h"
#include "tt_test.h"

/* Why the split of count is wrong, or NULL: partials that tile [0, count)
 * with none empty, within the limits */
static const char *plan_fault(size_t count)
{
    tt_sumsq_range a = tt_sumsq_plan(NULL, count);
    if (a.count != count || a.first != 0)
        return "not the range asked";
    if (count == 0)
        return a.parts == 0 ? NULL : "partials of nothing";
    if (a.parts < 1 || a.chunk < 1)
        return "no partial";
    if (a.parts > TT_SUMSQ_MAX_PARTS ||
        (size_t)a.parts > (count + TT_SUMSQ_MIN_CHUNK - 1) / TT_SUMSQ_MIN_CHUNK)
        return "too many partials";
    if ((size_t)a.parts * a.chunk < count)
        return "elements left over";
    if ((size_t)(a.parts - 1) * a.chunk >= count)
        return "an empty partial";
    return NULL;
}

/* n * (n + 1) / 2 modulo 2^64 (the sums below are all modulo 2^64: an
 * element e missed or read twice still changes one by e + 1) */
static unsigned long long triangle(unsigned long long n)
{
    return n % 2 == 0 ? n / 2 * (n + 1) : (n + 1) / 2 * n;
}

/* The sum of e + 1 over e = i0, i0 + 256, ... below i1, without reading
 * each (for ranges too large to mark element by element) */
static unsigned long long progression(size_t i0, size_t i1)
{
    unsigned long long k = i1 > i0 ? (i1 - i0 + TT_SUMSQ_THREADS - 1) / TT_SUMSQ_THREADS : 0;
    return k * ((unsigned long long)i0 + 1) + TT_SUMSQ_THREADS * (k > 0 ? triangle(k - 1) : 0);
}

/* Partial b of group r[0, n) as the first kernel runs it, on values
 * v(e) = e + 1 of each range's element e: its range (found as the kernel
 * finds it), the 256 threads' sums added up in the kernel's tree; each
 * element read and marked in seen, or where seen is NULL each thread's
 * progression summed at once */
static const char *partial_run(const tt_sumsq_range *r, int n, int b, uint8_t *const *seen,
                               unsigned long long *sum)
{
    int i = tt_sumsq_find(r, n, b);
    tt_sumsq_range a = r[i];
    if (i < 0 || i >= n || b < a.first || b >= a.first + a.parts)
        return "a block found a range not its own";
    int j = b - a.first;
    size_t lo = (size_t)j * a.chunk, hi = lo + a.chunk < a.count ? lo + a.chunk : a.count;
    unsigned long long acc[TT_SUMSQ_THREADS];
    for (int t = 0; t < TT_SUMSQ_THREADS; t++) {
        tt_sumsq_span s = tt_sumsq_span_of(a, j, t);
        acc[t] = 0;
        if (s.i0 < s.i1 && (s.i0 < lo || s.i1 > hi))
            return "a read outside the partial's elements";
        if (seen == NULL) {
            acc[t] = progression(s.i0, s.i1);
            continue;
        }
        for (size_t e = s.i0; e < s.i1; e += TT_SUMSQ_THREADS) {
            if (e < lo || e >= hi)
                return "a read outside the partial's elements";
            if (seen[i][e]++ != 0)
                return "an element read twice";
            acc[t] += (unsigned long long)e + 1;
        }
    }
    for (int h = TT_SUMSQ_THREADS / 2; h > 0; h /= 2)
        for (int t = 0; t < h; t++)
            acc[t] += acc[t + h];
    *sum = acc[0];
    return NULL;
}

/* The group r[0, n) through both kernels (partials into part, then each
 * range's merge: thread t its partials t, t + 256, ..., the tree): why a
 * range's sum is not that of v(e) over its elements, or NULL. part has
 * room partials; seen[i] (when not NULL) marks range i's elements. */
static const char *group_run(const tt_sumsq_range *r, int n, int room, uint8_t *const *seen,
                             unsigned long long *part)
{
    int parts = tt_sumsq_parts(r, n);
    if (parts > room)
        return "partials beyond the scratch";
    for (int b = 0; b < parts; b++) {
        const char *why = partial_run(r, n, b, seen, &part[b]);
        if (why != NULL)
            return why;
    }
    for (int i = 0; i < n; i++) {
        unsigned long long acc[TT_SUMSQ_THREADS], c = r[i].count;
        for (int t = 0; t < TT_SUMSQ_THREADS; t++) {
            acc[t] = 0;
            for (int p = t; p < r[i].parts; p += TT_SUMSQ_THREADS)
                acc[t] += part[r[i].first + p];
        }
        for (int h = TT_SUMSQ_THREADS / 2; h > 0; h /= 2)
            for (int t = 0; t < h; t++)
                acc[t] += acc[t + h];
        if (acc[0] != triangle(c))
            return "a range's sum is not every element's once";
        for (size_t e = 0; seen != NULL && e < c; e++)
            if (seen[i][e] != 1)
                return "an element never read";
    }
    return NULL;
}

/* The list count[0, n) through tt_sumsq_group and group_run, in groups of
 * at most room partials: every range in one group, at its place; the
 * number of groups in *groups */
static const char *list_run(int n, const size_t *count, int room, bool mark, int *groups)
{
    const float **x = calloc((size_t)n + 1, sizeof(*x));
    tt_sumsq_range *r = calloc((size_t)n + 1, sizeof(*r));
    unsigned long long *part = calloc((size_t)room, sizeof(*part));
    uint8_t **seen = calloc((size_t)n + 1, sizeof(*seen));
    const char *why = x == NULL || r == NULL || part == NULL || seen == NULL ? "no memory" : NULL;
    for (int i = 0; i < n && why == NULL && mark; i++)
        if ((seen[i] = calloc(count[i] + 1, 1)) == NULL)
            why = "no memory";
    *groups = 0;
    for (int i = 0; i < n && why == NULL; (*groups)++) {
        int k = tt_sumsq_group(n - i, x + i, count + i, room, r + i);
        if (k < 1 || k > n - i)
            why = "a group of no ranges, or past the list";
        for (int q = i; q < i + k && why == NULL; q++) {
            tt_sumsq_range a = tt_sumsq_plan(NULL, count[q]);
            if (r[q].count != count[q] || r[q].chunk != a.chunk || r[q].parts != a.parts ||
                r[q].first != (q == i ? 0 : r[q - 1].first + r[q - 1].parts))
                why = "a range not at its place, or not split as alone";
        }
        if (why == NULL && i + k < n && tt_sumsq_parts(r + i, k) +
                                                tt_sumsq_plan(NULL, count[i + k]).parts <= room)
            why = "a group ended before the scratch was full";
        if (why == NULL)
            why = group_run(r + i, k, room, mark ? seen + i : NULL, part);
        i += k;
    }
    for (int i = 0; i < n && seen != NULL; i++)
        free(seen[i]);
    free(seen), free(part), free(r), free(x);
    return why;
}

/* ResNet-50's 161 parameters' sizes (torchvision's: conv weights, the
 * batchnorms' gamma and beta, fc); returns how many */
static int resnet50_sizes(size_t *s)
{
    const int blocks[4] = {3, 4, 6, 3}, width[4] = {64, 128, 256, 512};
    int k = 0, in = 64;
    s[k++] = 64 * 3 * 7 * 7, s[k++] = 64, s[k++] = 64;
    for (int st = 0; st < 4; st++)
        for (int b = 0; b < blocks[st]; b++) {
            size_t w = (size_t)width[st];
            s[k++] = w * in, s[k++] = w, s[k++] = w;
            s[k++] = w * w * 9, s[k++] = w, s[k++] = w;
            s[k++] = 4 * w * w, s[k++] = 4 * w, s[k++] = 4 * w;
            if (b == 0)
                s[k++] = 4 * w * in, s[k++] = 4 * w, s[k++] = 4 * w;
            in = 4 * width[st];
        }
    s[k++] = 2048 * 1000, s[k++] = 1000;
    return k;
}

/* Each partial of count's split by its bounds (for counts too large to
 * mark): partial j starts where j - 1 ended, thread t at its start + t,
 * and the threads' progressions hold the partial's elements between them */
static const char *bounds_fault(size_t count)
{
    tt_sumsq_range a = tt_sumsq_plan(NULL, count);
    size_t end = 0;
    for (int j = 0; j < a.parts; j++) {
        size_t lo = tt_sumsq_span_of(a, j, 0).i0, hi = tt_sumsq_span_of(a, j, 0).i1, n = 0;
        if (lo != end || hi <= lo || hi > count)
            return "partials that do not tile the range";
        for (int t = 0; t < TT_SUMSQ_THREADS; t++) {
            tt_sumsq_span s = tt_sumsq_span_of(a, j, t);
            if (s.i0 != lo + (size_t)t || s.i1 != hi)
                return "a thread not at its place";
            n += s.i1 > s.i0 ? (s.i1 - s.i0 + TT_SUMSQ_THREADS - 1) / TT_SUMSQ_THREADS : 0;
        }
        if (n != hi - lo)
            return "a partial's threads do not hold its elements";
        end = hi;
    }
    return end == count ? NULL : "elements past the last partial";
}

static void test_plan(void)
{
    const char *why = NULL;
    size_t bad = 0;
    for (size_t m = 0; m <= 20000 && why == NULL; m++)
        if ((why = plan_fault(m)) != NULL)
            bad = m;
    size_t big[] = {(size_t)1 << 31, ((size_t)1 << 31) + 1, ((size_t)1 << 32) + 12345,
                    (size_t)TT_SUMSQ_MIN_CHUNK * TT_SUMSQ_MAX_PARTS + 1, (size_t)1 << 40};
    for (size_t k = 0; k < sizeof(big) / sizeof(big[0]) && why == NULL; k++)
        if ((why = plan_fault(big[k])) != NULL || (why = bounds_fault(big[k])) != NULL)
            bad = big[k];
    tt_ok(why == NULL, "counts 0..20000, 2^31, 2^31 + 1, 2^32 + 12345, 2^40: partials that "
          "tile the range, none empty, within the limits%s%s", why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("count %zu", bad);
    tt_sumsq_range one = tt_sumsq_plan(NULL, 1), none = tt_sumsq_plan(NULL, 0);
    tt_sumsq_range rn = tt_sumsq_plan(NULL, 25557032), huge = tt_sumsq_plan(NULL, (size_t)1 << 40);
    float f;
    tt_sumsq_range other = tt_sumsq_plan(&f, 25557032);
    tt_ok(one.parts == 1 && one.chunk == 1 && none.parts == 0 && rn.parts == TT_SUMSQ_MAX_PARTS &&
              huge.parts == TT_SUMSQ_MAX_PARTS && other.chunk == rn.chunk &&
              other.parts == rn.parts && other.x == &f,
          "one element: one partial; none: none; ResNet-50's 25.6 M gradients in one range "
          "(clip_global_norm): %d partials of %zu; 2^40: %d; the split is the count's alone",
          rn.parts, rn.chunk, huge.parts);
}

static void test_lists(void)
{
    size_t s[200], lars[400];
    int n = resnet50_sizes(s), groups = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        total += s[i];
        lars[2 * i] = lars[2 * i + 1] = s[i]; /* a parameter, then its gradient */
    }
    tt_ok(n == 161 && total == 25557032, "ResNet-50: %d parameters, %zu floats", n, total);
    const char *why = list_run(2 * n, lars, (int)TT_SUMSQ_SCRATCH_DOUBLES, true, &groups);
    tt_ok(why == NULL && groups == 1, "LARS's list of ResNet-50 (322 ranges): every element "
          "read once, by its own partial, each range's sum exact, in one group inside the "
          "scratch (%d)%s%s", groups, why ? ": " : "", why ? why : "");
    int small = 3000;
    why = list_run(2 * n, lars, small, true, &groups);
    tt_ok(why == NULL && groups > 4, "the same in a scratch of %d partials: %d groups, each "
          "full before the next starts, every range once%s%s", small, groups, why ? ": " : "",
          why ? why : "");
    size_t odd[] = {0, 1, 0, 0, 4095, 4096, 4097, 12345, 1, 0, 9408, 2048000, 0};
    int n_odd = (int)(sizeof(odd) / sizeof(odd[0]));
    why = list_run(n_odd, odd, (int)TT_SUMSQ_SCRATCH_DOUBLES, true, &groups);
    const char *why1 = list_run(n_odd, odd, TT_SUMSQ_MAX_PARTS, true, &groups);
    tt_ok(why == NULL && why1 == NULL, "empty ranges first, between and last, one element, "
          "a chunk's edges, 64x3x7x7, 2048x1000: every element once, exact sums, also with "
          "room for one range's partials only%s%s", why || why1 ? ": " : "",
          why ? why : why1 ? why1 : "");
    size_t ones[TT_SUMSQ_MAX_PARTS + 1];
    for (int i = 0; i <= TT_SUMSQ_MAX_PARTS; i++)
        ones[i] = 1;
    why = list_run(TT_SUMSQ_MAX_PARTS + 1, ones, TT_SUMSQ_MAX_PARTS, true, &groups);
    tt_ok(why == NULL && groups == 2, "%d one-element ranges in a scratch of %d partials: %d "
          "groups, the first full, none past it%s%s", TT_SUMSQ_MAX_PARTS + 1, TT_SUMSQ_MAX_PARTS,
          groups, why ? ": " : "", why ? why : "");
    size_t each[64];
    for (int i = 0; i < 64; i++)
        each[i] = ((size_t)1 << 31) + (size_t)i * 1000003;
    why = list_run(64, each, (int)TT_SUMSQ_SCRATCH_DOUBLES, false, &groups);
    tt_ok(why == NULL && groups == 1, "64 ranges past 2^31: exact sums (by partials), one group "
          "(%d)%s%s", groups, why ? ": " : "", why ? why : "");
}

int main(void)
{
    test_plan();
    test_lists();
    return tt_done();
}
