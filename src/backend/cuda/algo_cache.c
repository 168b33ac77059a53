/* algo_cache.c - keys, the pick among timed candidates, and the table.
 *
 * A model has a few dozen convolution shapes at most (three passes each), so
 * the table is an array searched linearly: simple, and far cheaper than the
 * convolution it serves. */
#include "backend/cuda/algo_cache.h"

#include <stdlib.h>
#include <string.h>

struct algo_cache {
    algo_key *keys;
    algo_choice *choices;
    int n, cap;
};

algo_key algo_key_make(conv_pass pass, const window_desc *d, bool tf32, bool deterministic)
{
    algo_key k;
    memset(&k, 0, sizeof(k)); /* keys are compared field by field, but keep them clean */
    k.pass = (int)pass;
    k.n = d->n;
    k.c = d->c;
    k.h = d->h;
    k.w = d->w;
    k.f = d->f;
    k.k = d->k;
    k.stride = d->stride;
    k.pad = d->pad;
    k.tf32 = tf32;
    k.deterministic = deterministic;
    return k;
}

static bool key_equal(const algo_key *a, const algo_key *b)
{
    return a->pass == b->pass && a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w &&
           a->f == b->f && a->k == b->k && a->stride == b->stride && a->pad == b->pad &&
           a->tf32 == b->tf32 && a->deterministic == b->deterministic && a->nhwc == b->nhwc &&
           a->graph == b->graph && a->layout == b->layout && a->dtype == b->dtype &&
           a->align == b->align;
}

int algo_pick(const algo_perf *r, int n, bool deterministic, bool tf32, size_t ws_limit)
{
    int best = -1; /* the first that qualifies: the list is in cuDNN's order */
    for (int i = 0; i < n; i++) {
        if (!r[i].ok || r[i].memory > ws_limit)
            continue;
        if (deterministic && !r[i].deterministic)
            continue;
        if (!tf32 && r[i].tensor_math)
            continue;
        best = i;
        break;
    }
    return best;
}

algo_cache *algo_cache_create(void)
{
    return calloc(1, sizeof(algo_cache));
}

void algo_cache_free(algo_cache *c)
{
    if (c == NULL)
        return;
    free(c->keys);
    free(c->choices);
    free(c);
}

static int find_index(const algo_cache *c, const algo_key *key)
{
    for (int i = 0; i < c->n; i++)
        if (key_equal(&c->keys[i], key))
            return i;
    return -1;
}

const algo_choice *algo_cache_find(const algo_cache *c, const algo_key *key)
{
    int i = find_index(c, key);
    return i < 0 ? NULL : &c->choices[i];
}

int algo_cache_put(algo_cache *c, const algo_key *key, const algo_choice *choice)
{
    int i = find_index(c, key);
    if (i >= 0) {
        c->choices[i] = *choice;
        return 0;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        algo_key *k = realloc(c->keys, (size_t)cap * sizeof(*k));
        if (k == NULL)
            return -1;
        c->keys = k;
        algo_choice *ch = realloc(c->choices, (size_t)cap * sizeof(*ch));
        if (ch == NULL)
            return -1;
        c->choices = ch;
        c->cap = cap;
    }
    c->keys[c->n] = *key;
    c->choices[c->n] = *choice;
    c->n++;
    return 0;
}

int algo_cache_size(const algo_cache *c)
{
    return c->n;
}
