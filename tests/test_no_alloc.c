/* test_no_alloc.c - the steady-state training step allocates nothing.
 *
 * Every buffer (activations, workspaces, oneDNN primitives and their memory
 * objects, all-reduce scratch, prefetch slots) is made before or during the
 * first step and reused. The check is black-box: this program replaces
 * malloc and friends (glibc lets an executable interpose them, for the shared
 * libraries too) to count calls, and trains the same job for 4 and for 12
 * steps. Setup and teardown are the same for both, so any allocation per
 * step adds at least 8 to the second count. (With prefetch workers the
 * counts may differ by one or two either way: thread start-up is timing.)
 *
 * One exception, counted apart and reported: oneDNN's dnnl_primitive_execute
 * builds a small std::unordered_map of the arguments on every call, inside
 * the library, which its C API gives no way to avoid. Allocations with a
 * libdnnl frame on the stack are those.
 *
 * Under AddressSanitizer the allocator belongs to ASan, so the check skips
 * there (visibly); the plain build runs it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/trainer.h"
#include "tt_test.h"
#include "util/log.h"

#if defined(__SANITIZE_ADDRESS__)
#define COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COUNTING 0
#endif
#endif
#ifndef COUNTING
#define COUNTING 1
#endif

static atomic_long allocs, dnnl_allocs;

#if COUNTING
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* Counts one allocation, apart when oneDNN is on the stack. backtrace() may
 * allocate itself (the first call loads libgcc_s), hence the guard. */
static _Thread_local bool in_hook;

static void count(void)
{
    if (in_hook)
        return;
    in_hook = true;
    void *frames[16];
    int n = backtrace(frames, 16);
    bool dnnl = false;
    for (int i = 0; i < n && !dnnl; i++) {
        Dl_info info;
        dnnl = dladdr(frames[i], &info) != 0 && info.dli_fname != NULL &&
               strstr(info.dli_fname, "libdnnl") != NULL;
    }
    atomic_fetch_add(dnnl ? &dnnl_allocs : &allocs, 1);
    in_hook = false;
}

void *malloc(size_t n)
{
    count();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    count();
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    count();
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    count();
    return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
    count();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    count();
    void *p = __libc_memalign(align, n);
    if (p == NULL)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}
#endif

static char dir[256];

/* A small residual network with every layer type the CPU backend runs in a
 * step: conv (oneDNN or im2col), batchnorm, relu, add, pools, dropout, dense. */
static const char *MODEL =
    "input = [3, 12, 12]; classes = 4;\n"
    "layers = (\n"
    " { name = \"conv0\"; type = \"conv2d\"; filters = 8; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"bn0\"; type = \"batchnorm\"; },\n"
    " { name = \"relu0\"; type = \"relu\"; },\n"
    " { name = \"conv1\"; type = \"conv2d\"; filters = 8; kernel = 3; padding = 1; activation = \"relu\"; },\n"
    " { name = \"sum\"; type = \"add\"; inputs = [\"relu0\", \"conv1\"]; },\n"
    " { name = \"pool\"; type = \"maxpool\"; kernel = 2; },\n"
    " { name = \"avg\"; type = \"avgpool\"; kernel = 2; },\n"
    " { name = \"drop\"; type = \"dropout\"; rate = 0.25; },\n"
    " { name = \"fc0\"; type = \"dense\"; units = 16; activation = \"relu\"; },\n"
    " { name = \"gap_in\"; type = \"dense\"; units = 4; }\n"
    ");\n"
    "loss = \"softmax_cross_entropy\";\n";

/* Allocations made by creating, training for `steps` steps and freeing a
 * trainer (those inside oneDNN into *in_dnnl); -1 when training fails. */
static long count_allocs(const char *trainer, int workers, int steps, long *in_dnnl)
{
    char job[1024];
    snprintf(job, sizeof(job),
             "model = \"model.cfg\";\n"
             "dataflow = { source = { type = \"fake\"; shape = [3, 12, 12]; classes = 4; "
             "size = 4096; };\n"
             "  augment = ( { type = \"random_crop\"; size = 12; padding = 2; }, { type = \"flip\"; } );\n"
             "  batch_size = 8; prefetch = { workers = %d; queue = 2; }; };\n"
             "optimizer = { type = \"momentum\"; learning_rate = 0.01; momentum = 0.9; };\n"
             "trainer = %s;\n"
             "max_epoch = 1; steps_per_epoch = %d;\n"
             "callbacks = ( ); extra_callbacks = ( ); monitors = ( );\n",
             workers, trainer, steps);
    tt_write_file(dir, "job.cfg", job);
    char path[512];
    snprintf(path, sizeof(path), "%s/job.cfg", dir);
    job_t j;
    trainer_t tr;
    tt_err err = {0};
    long before = atomic_load(&allocs), dnnl_before = atomic_load(&dnnl_allocs);
    if (job_load(path, NULL, 0, &j, &err) != 0)
        return tt_diag("job: %s", err.msg), -1;
    int rc = trainer_create(&tr, &j, &err);
    if (rc == 0) {
        rc = trainer_train(&tr, &err);
        trainer_free(&tr);
    }
    job_free(&j);
    if (rc != 0)
        return tt_diag("training: %s", err.msg), -1;
    *in_dnnl = atomic_load(&dnnl_allocs) - dnnl_before;
    return atomic_load(&allocs) - before;
}

int main(void)
{
    if (!COUNTING) {
        tt_skip("no allocation per step: the allocator belongs to AddressSanitizer here");
        return tt_done();
    }
    log_set_quiet(true);
    tt_tmpdir_make(dir, sizeof(dir), "no_alloc");
    tt_write_file(dir, "model.cfg", MODEL);
    long warm;
    count_allocs("{ type = \"simple\"; }", 0, 1, &warm); /* one-time library set-up */
    const char *trainers[] = {"{ type = \"simple\"; threads_per_tower = 2; }",
                              "{ type = \"sync_replicated\"; nr_tower = 2; allreduce = \"ring\"; }",
                              "{ type = \"sync_parameter_server\"; nr_tower = 2; }"};
    for (int t = 0; t < 3; t++)
        for (int workers = 0; workers <= 2; workers += 2) {
            long few_dnnl, many_dnnl;
            long few = count_allocs(trainers[t], workers, 4, &few_dnnl);
            long many = count_allocs(trainers[t], workers, 12, &many_dnnl);
            if (many_dnnl != few_dnnl)
                tt_diag("inside oneDNN's primitive execute: %ld allocations per step",
                        (many_dnnl - few_dnnl) / 8);
            tt_ok(few > 0 && many > 0 && many - few < 8,
                  "%s, %d prefetch workers: %ld allocations for 4 steps, %ld for 12 "
                  "(none per step)", trainers[t], workers, few, many);
        }
    tt_tmpdir_remove(dir);
    return tt_done();
}
