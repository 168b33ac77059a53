/* weight_copies.c - which weight tensors have this step's 16-bit copy
 * (weight_copies.h). */
#include "backend/weight_copies.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/env.h"

int weight_copies_init(weight_copies *wc, char *why, size_t why_len)
{
    static const char *const when[] = {"step", "each_call"};
    memset(wc, 0, sizeof(*wc));
    int e = env_word("TT_WEIGHT_COPIES", when, 2);
    if (e != ENV_OTHER) {
        wc->each_call = e == 1;
        return 0;
    }
    snprintf(why, why_len, "TT_WEIGHT_COPIES=\"%.40s\": expected \"step\" or \"each_call\"",
             getenv("TT_WEIGHT_COPIES"));
    return -1;
}

void weight_copies_free(weight_copies *wc)
{
    for (int i = 0; i < wc->n_blocks; i++)
        free(wc->blocks[i].tensors);
    free(wc->blocks);
    memset(wc, 0, sizeof(*wc));
}

static wc_block *block_of(weight_copies *wc, const float *params)
{
    for (int i = 0; i < wc->n_blocks; i++)
        if (wc->blocks[i].params == params)
            return &wc->blocks[i];
    return NULL;
}

int weight_copies_add(weight_copies *wc, const float *params, size_t count, void *mirror)
{
    wc_block *b = block_of(wc, params);
    if (b == NULL) {
        if (wc->n_blocks == wc->cap_blocks) {
            int cap = wc->cap_blocks ? 2 * wc->cap_blocks : 2;
            wc_block *grown = realloc(wc->blocks, (size_t)cap * sizeof(*grown));
            if (grown == NULL)
                return -1;
            wc->blocks = grown;
            wc->cap_blocks = cap;
        }
        b = &wc->blocks[wc->n_blocks++];
        memset(b, 0, sizeof(*b));
    }
    b->params = params;
    b->count = count;
    b->mirror = mirror;
    b->open = false;
    b->n_tensors = 0; /* a new mirror holds nothing yet */
    return 0;
}

void *weight_copies_remove(weight_copies *wc, const float *params)
{
    wc_block *b = block_of(wc, params);
    if (b == NULL)
        return NULL;
    void *mirror = b->mirror;
    free(b->tensors);
    *b = wc->blocks[--wc->n_blocks];
    return mirror;
}

void weight_copies_step(weight_copies *wc, const float *params, bool begin)
{
    wc_block *b = block_of(wc, params);
    if (b == NULL)
        return;
    if (begin)
        b->step++; /* every copy's `made` is now older than the step */
    b->open = begin;
}

/* The tensor at offset in b, added (not yet made) when first met; NULL
 * when out of host memory. */
static wc_tensor *tensor_of(wc_block *b, size_t offset, size_t count)
{
    for (int i = 0; i < b->n_tensors; i++)
        if (b->tensors[i].offset == offset && b->tensors[i].count == count)
            return &b->tensors[i];
    if (b->n_tensors == b->cap_tensors) {
        int cap = b->cap_tensors ? 2 * b->cap_tensors : 16;
        wc_tensor *grown = realloc(b->tensors, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        b->tensors = grown;
        b->cap_tensors = cap;
    }
    wc_tensor *t = &b->tensors[b->n_tensors++];
    *t = (wc_tensor){offset, count, WC_AS_STORED, 0};
    return t;
}

wc_answer weight_copies_find(weight_copies *wc, const float *w, size_t count, wc_order order,
                             void **mirror, size_t *offset)
{
    for (int i = 0; i < wc->n_blocks; i++) {
        wc_block *b = &wc->blocks[i];
        uintptr_t lo = (uintptr_t)b->params, at_byte = (uintptr_t)w;
        if (at_byte < lo || count > b->count || (at_byte - lo) / sizeof(float) > b->count - count)
            continue;
        if (!b->open)
            return WC_NONE;
        size_t at = (at_byte - lo) / sizeof(float);
        wc_tensor *t = tensor_of(b, at, count);
        if (t == NULL)
            return WC_NONE;
        *mirror = b->mirror;
        *offset = at;
        if (!wc->each_call && t->made == b->step && t->order == order)
            return WC_FRESH;
        t->made = b->step;
        t->order = order;
        wc->conversions++;
        return WC_CONVERT;
    }
    return WC_NONE;
}
