/* cuda_conv_graph.c - convolution plans through cuDNN's graph API
 * (cuda_conv_graph.h says what and why), and the backend's use of them
 * (cuda_conv_graph_plan / _run, called from cuda_conv.c). */
#include "backend/cuda/cuda_conv_graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "util/env.h"
#include "util/log.h"

/* conv_graph_spec.h's note bits are cuDNN 9's note values */
_Static_assert(CG_NOTE_TENSOR_CORE == 1u << CUDNN_NUMERICAL_NOTE_TENSOR_CORE, "note bits");
_Static_assert(CG_NOTE_DOWN_CONVERT_INPUTS == 1u << CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
               "note bits");
_Static_assert(CG_NOTE_NONDETERMINISTIC == 1u << CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
               "note bits");
_Static_assert(CG_NOTE_WINOGRAD == 1u << CUDNN_NUMERICAL_NOTE_WINOGRAD, "note bits");

/* heuristic results examined per mode (each has an engine config descriptor) */
#define MAX_CONFIGS 32
#define MAX_REPS 64

/* The descriptors of one graph: x, w, y tensors, the convolution, the
 * operation and the operation graph. */
typedef struct {
    cudnnBackendDescriptor_t tensor[3], conv, op, graph;
} graph_descs;

/* A chosen plan, with its engine config and graph kept alive beside it. */
typedef struct {
    cudnnBackendDescriptor_t plan, cfg;
    graph_descs g;
    size_t ws_bytes;
} table_entry;

struct cg_table {
    table_entry *e;
    int n, cap;
};

/* A candidate: an engine config, its notes, and once finalized its plan. */
typedef struct {
    cudnnBackendDescriptor_t cfg, plan;
    unsigned notes;     /* CG_NOTE_* */
    bool runtime_compiled;
    int64_t engine;     /* global index: the same engine from two modes once */
    size_t ws_bytes;
} candidate;

static int gk(cudnnStatus_t rc, const char *what, tt_err *err)
{
    if (rc == CUDNN_STATUS_SUCCESS)
        return 0;
    char detail[512] = "";
    cu.cudnnGetLastErrorString(detail, sizeof(detail));
    for (char *q = detail; *q; q++)
        if (*q == '\n' || *q == '\r')
            *q = ' ';
    return err_set(err, TT_ERR_RUNTIME, "cuDNN graph API: %s: %s%s%s%s", what,
                   cu.cudnnGetErrorString(rc), detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
}

static void destroy(cudnnBackendDescriptor_t *d)
{
    if (*d != NULL)
        cu.cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

static int make(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d, tt_err *err)
{
    *d = NULL;
    return gk(cu.cudnnBackendCreateDescriptor(type, d), "cudnnBackendCreateDescriptor", err);
}

static int set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
               cudnnBackendAttributeType_t type, int64_t count, const void *v, tt_err *err)
{
    char what[64];
    snprintf(what, sizeof(what), "cudnnBackendSetAttribute (attribute %d)", (int)name);
    return gk(cu.cudnnBackendSetAttribute(d, name, type, count, v), what, err);
}

static cudnnDataType_t dnn_type(cg_dtype t)
{
    return t == CG_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
           : t == CG_DTYPE_HALF ? CUDNN_DATA_HALF
                                : CUDNN_DATA_FLOAT;
}

static void graph_destroy(graph_descs *g)
{
    destroy(&g->graph);
    destroy(&g->op);
    destroy(&g->conv);
    for (int i = 0; i < 3; i++)
        destroy(&g->tensor[i]);
}

static int make_tensor(const cg_tensor *t, cudnnDataType_t dt, cudnnBackendDescriptor_t *d,
                       tt_err *err)
{
    if (make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, d, err) != 0 ||
        set(*d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, err) != 0 ||
        set(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t->dims, err) != 0 ||
        set(*d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t->strides, err) != 0 ||
        set(*d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t->uid, err) != 0 ||
        set(*d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &t->align, err) != 0)
        return -1;
    return gk(cu.cudnnBackendFinalize(*d), "cudnnBackendFinalize (tensor)", err);
}

/* cross-correlation, float compute type (also for 16-bit data, as PyTorch) */
static int make_conv(const window_desc *w, cudnnBackendDescriptor_t *d, tt_err *err)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, dil[2] = {1, 1}, str[2] = {w->stride, w->stride}, pad[2] = {w->pad, w->pad};
    if (make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, d, err) != 0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, err) != 0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, err) !=
            0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, err) != 0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, err) != 0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, err) != 0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, err) != 0 ||
        set(*d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, err) != 0)
        return -1;
    return gk(cu.cudnnBackendFinalize(*d), "cudnnBackendFinalize (convolution)", err);
}

/* The operation of the pass: its descriptor type and the attribute names
 * of alpha, beta, the convolution and its x, w, y operands. */
static int make_op(const cg_spec *s, graph_descs *g, tt_err *err)
{
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t a[6]; /* alpha, beta, conv, x, w, y */
    if (s->pass == CONV_PASS_FORWARD) {
        type = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
        cudnnBackendAttributeName_t f[6] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
        memcpy(a, f, sizeof(a));
    } else if (s->pass == CONV_PASS_BACKWARD_DATA) {
        type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
        cudnnBackendAttributeName_t f[6] = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
        memcpy(a, f, sizeof(a));
    } else {
        type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
        cudnnBackendAttributeName_t f[6] = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
        memcpy(a, f, sizeof(a));
    }
    float alpha = 1.0f, beta = 0.0f;
    cudnnBackendDescriptor_t *d = &g->op;
    if (make(type, d, err) != 0 || set(*d, a[0], CUDNN_TYPE_FLOAT, 1, &alpha, err) != 0 ||
        set(*d, a[1], CUDNN_TYPE_FLOAT, 1, &beta, err) != 0 ||
        set(*d, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv, err) != 0 ||
        set(*d, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->tensor[0], err) != 0 ||
        set(*d, a[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->tensor[1], err) != 0 ||
        set(*d, a[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->tensor[2], err) != 0)
        return -1;
    return gk(cu.cudnnBackendFinalize(*d), "cudnnBackendFinalize (convolution operation)", err);
}

/* tensors -> convolution -> operation (no handle needed) */
static int op_build(const cg_spec *s, graph_descs *g, tt_err *err)
{
    memset(g, 0, sizeof(*g));
    cg_tensor t[3];
    cg_spec_tensors(s, t);
    for (int i = 0; i < 3; i++)
        if (make_tensor(&t[i], dnn_type(s->dtype), &g->tensor[i], err) != 0)
            return -1;
    return make_conv(&s->win, &g->conv, err) != 0 || make_op(s, g, err) != 0 ? -1 : 0;
}

int cg_spec_validate(const cg_spec *s, tt_err *err)
{
    graph_descs g;
    int rc = op_build(s, &g, err);
    graph_destroy(&g);
    return rc;
}

/* ... -> operation graph */
static int graph_build(cudnnHandle_t h, const cg_spec *s, graph_descs *g, tt_err *err)
{
    if (op_build(s, g, err) != 0 ||
        make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph, err) != 0 ||
        set(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->op,
            err) != 0 ||
        set(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, err) != 0)
        return -1;
    return gk(cu.cudnnBackendFinalize(g->graph), "cudnnBackendFinalize (operation graph)", err);
}

/* The numerical notes, runtime compilation and global index of a config's
 * engine. */
static int config_notes(candidate *c, tt_err *err)
{
    cudnnBackendDescriptor_t e = NULL;
    int64_t n = 0;
    int rc = -1;
    cudnnBackendNumericalNote_t num[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    if (make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e, err) != 0 ||
        gk(cu.cudnnBackendGetAttribute(c->cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
           "cudnnBackendGetAttribute (engine config's engine)", err) != 0 ||
        gk(cu.cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                       &n, num),
           "cudnnBackendGetAttribute (numerical notes)", err) != 0)
        goto out;
    c->notes = 0;
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        c->notes |= 1u << (unsigned)num[i];
    /* the numerical notes decide whether it may run; the behavior notes
     * and the index only order and dedupe (unknown: precompiled, unique) */
    c->runtime_compiled = false;
    if (cu.cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                    CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                                    beh) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
            c->runtime_compiled |= beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    if (cu.cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                    &c->engine) != CUDNN_STATUS_SUCCESS)
        c->engine = -1;
    rc = 0;
out:
    destroy(&e);
    return rc;
}

/* Appends the allowed configs of heuristics mode to c[*n] (at most max),
 * skipping engines already there and configs whose notes cannot be read. */
static int heuristics(cudnnBackendDescriptor_t graph, const cg_spec *s,
                      cudnnBackendHeurMode_t mode, candidate *c, int *n, int max, tt_err *err)
{
    cudnnBackendDescriptor_t heur = NULL, cfg[MAX_CONFIGS] = {NULL};
    int64_t count = 0, got = 0;
    int rc = -1;
    if (make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur, err) != 0 ||
        set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
            err) != 0 ||
        set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, err) != 0 ||
        gk(cu.cudnnBackendFinalize(heur), "cudnnBackendFinalize (heuristics)", err) != 0 ||
        gk(cu.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
           "cudnnBackendGetAttribute (heuristic result count)", err) != 0)
        goto out;
    if (count > MAX_CONFIGS)
        count = MAX_CONFIGS;
    for (int64_t i = 0; i < count; i++)
        if (make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i], err) != 0)
            goto out;
    if (count > 0 &&
        gk(cu.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
           "cudnnBackendGetAttribute (heuristic results)", err) != 0)
        goto out;
    for (int64_t i = 0; i < got && *n < max; i++) {
        candidate k = {.cfg = cfg[i]};
        tt_err ignore = {0};
        if (config_notes(&k, &ignore) != 0)
            continue; /* notes unknown: the filter cannot pass it */
        bool seen = false;
        for (int j = 0; j < *n && k.engine >= 0; j++)
            seen |= c[j].engine == k.engine;
        if (seen || !cg_notes_allowed(s, k.notes))
            continue;
        c[(*n)++] = k;
        cfg[i] = NULL; /* now the candidate's */
    }
    rc = 0;
out:
    for (int i = 0; i < MAX_CONFIGS; i++)
        destroy(&cfg[i]);
    destroy(&heur);
    return rc;
}

/* An execution plan for config c; false (not an error) when this engine
 * cannot finalize for the graph. */
static bool plan_finalize(cudnnHandle_t h, candidate *c)
{
    tt_err ignore = {0};
    int64_t ws = 0, n = 0;
    if (make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &c->plan, &ignore) != 0 ||
        set(c->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, &ignore) != 0 ||
        set(c->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &c->cfg, &ignore) != 0 ||
        cu.cudnnBackendFinalize(c->plan) != CUDNN_STATUS_SUCCESS ||
        cu.cudnnBackendGetAttribute(c->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                    CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
        ws < 0) {
        destroy(&c->plan);
        return false;
    }
    c->ws_bytes = (size_t)ws;
    return true;
}

static int execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const cg_ptrs *p, void *ws,
                   tt_err *err)
{
    cudnnBackendDescriptor_t vp = NULL;
    int64_t uids[3] = {CG_UID_X, CG_UID_W, CG_UID_Y};
    void *ptrs[3] = {p->x, p->w, p->y};
    int rc = -1;
    if (make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp, err) == 0 &&
        set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, err) == 0 &&
        set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, err) == 0 &&
        set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, err) == 0 &&
        gk(cu.cudnnBackendFinalize(vp), "cudnnBackendFinalize (variant pack)", err) == 0)
        rc = gk(cu.cudnnBackendExecute(h, plan, vp), "cudnnBackendExecute", err);
    destroy(&vp);
    return rc;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One run of plan between two events: its time in *ms. */
static int timed_run(cudnnHandle_t h, cudaStream_t st, cudnnBackendDescriptor_t plan,
                     const cg_ptrs *p, void *ws, cudaEvent_t ev[2], float *ms, tt_err *err)
{
    if (cudaEventRecord(ev[0], st) != cudaSuccess || execute(h, plan, p, ws, err) != 0 ||
        cudaEventRecord(ev[1], st) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess)
        return -1;
    return 0;
}

/* The median of reps event-timed runs after a timed warm-up; a plan whose
 * warm-up takes over cutoff_ms (when > 0: a few times the best plan's
 * median so far) is not timed further and its warm-up time returned: an
 * NCHW plan can be 20 times slower than the best, and reps of it would
 * lengthen the search for nothing. NaN when a run fails. */
static float time_plan(cudnnHandle_t h, cudaStream_t st, cudnnBackendDescriptor_t plan,
                       const cg_ptrs *p, void *ws, int reps, float cutoff_ms, tt_err *err)
{
    float t[MAX_REPS], warm = 0.0f;
    cudaEvent_t ev[2] = {NULL, NULL};
    float med = NAN;
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess ||
        timed_run(h, st, plan, p, ws, ev, &warm, err) != 0)
        goto out;
    if (cutoff_ms > 0.0f && warm > cutoff_ms) {
        med = warm;
        goto out;
    }
    for (int i = 0; i < reps; i++)
        if (timed_run(h, st, plan, p, ws, ev, &t[i], err) != 0)
            goto out;
    qsort(t, (size_t)reps, sizeof(float), cmp_float);
    med = reps > 0 ? t[reps / 2] : 0.0f;
out:
    for (int i = 0; i < 2; i++)
        if (ev[i] != NULL)
            cudaEventDestroy(ev[i]);
    if (med != med)
        cudaGetLastError(); /* a failed event call is this timing's, not the tower's */
    return med;
}

cg_table *cg_table_create(void)
{
    return calloc(1, sizeof(cg_table));
}

void cg_table_free(cg_table *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < t->n; i++) {
        destroy(&t->e[i].plan);
        destroy(&t->e[i].cfg);
        graph_destroy(&t->e[i].g);
    }
    free(t->e);
    free(t);
}

static void candidates_free(candidate *c, int n)
{
    for (int i = 0; i < n; i++) {
        destroy(&c[i].plan);
        destroy(&c[i].cfg);
    }
}

/* Heuristics mode A, then the fallback list (either may fail alone);
 * precompiled engines first, each group in cuDNN's order. */
static int gather(cudnnBackendDescriptor_t graph, const cg_spec *s, candidate *c, int *n,
                  tt_err *err)
{
    candidate all[MAX_CONFIGS];
    int m = 0;
    tt_err ea = {0}, ef = {0};
    int ra = heuristics(graph, s, CUDNN_HEUR_MODE_A, all, &m, MAX_CONFIGS, &ea);
    int rf = heuristics(graph, s, CUDNN_HEUR_MODE_FALLBACK, all, &m, MAX_CONFIGS, &ef);
    *n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < m; i++)
            if (all[i].runtime_compiled == (pass == 1))
                c[(*n)++] = all[i];
    if (m > 0)
        return 0;
    if (ra != 0 && rf != 0)
        return err_set(err, TT_ERR_RUNTIME, "%s", ea.msg);
    return err_set(err, TT_ERR_RUNTIME, "cuDNN graph API: no engine config of heuristics A "
                   "and fallback passes the numerical-note filter%s",
                   s->deterministic ? " (deterministic)" : "");
}

static int table_add(cg_table *t, const table_entry *e)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        table_entry *m = realloc(t->e, (size_t)cap * sizeof(*m));
        if (m == NULL)
            return -1;
        t->e = m;
        t->cap = cap;
    }
    t->e[t->n] = *e;
    return t->n++;
}

/* Finalizes up to how->max_plans candidates within ws_limit, times them
 * when asked, and returns the index of the pick among c (or -1). */
static int finalize_and_pick(cudnnHandle_t h, cudaStream_t st, const cg_spec *s,
                             const cg_search *how, const cg_ptrs *p, void *ws, size_t ws_limit,
                             candidate *c, int n, float *time_ms, tt_err *err)
{
    cg_candidate r[MAX_CONFIGS];
    bool timed = how->reps > 0 && !s->deterministic;
    int done = 0;
    float best = 0.0f;
    for (int i = 0; i < n; i++) {
        r[i] = (cg_candidate){.ok = false, .time_ms = NAN};
        /* a runtime-compiled engine (after the precompiled ones, gather())
         * only when none of those finalized: its finalize can take a second */
        if (done >= how->max_plans || (c[i].runtime_compiled && done > 0) ||
            !plan_finalize(h, &c[i]))
            continue;
        r[i].ws_bytes = c[i].ws_bytes;
        if (c[i].ws_bytes > ws_limit) {
            destroy(&c[i].plan);
            continue;
        }
        done++;
        r[i].ok = true;
        if (timed) {
            tt_err terr = {0};
            r[i].time_ms = time_plan(h, st, c[i].plan, p, ws, how->reps, 3.0f * best, &terr);
            r[i].ok = r[i].time_ms == r[i].time_ms; /* an engine that fails to run is out */
            if (r[i].ok && (best == 0.0f || r[i].time_ms < best))
                best = r[i].time_ms;
        }
    }
    int k = cg_pick(r, n, !timed, ws_limit);
    if (k < 0)
        err_set(err, TT_ERR_RUNTIME, "cuDNN graph API: none of %d engine configs finalized "
                "and ran within %zu bytes of workspace", n, ws_limit);
    else
        *time_ms = timed ? r[k].time_ms : 0.0f;
    return k;
}

int cg_table_build(cg_table *t, cudnnHandle_t h, cudaStream_t st, const cg_spec *s,
                   const cg_search *how, const cg_ptrs *p, void *ws, size_t ws_limit,
                   size_t *ws_bytes, float *time_ms, tt_err *err)
{
    table_entry e = {0};
    candidate c[MAX_CONFIGS];
    int n = 0, k = -1, at = -1;
    if (graph_build(h, s, &e.g, err) != 0 || gather(e.g.graph, s, c, &n, err) != 0) {
        graph_destroy(&e.g);
        return -1;
    }
    k = finalize_and_pick(h, st, s, how, p, ws, ws_limit, c, n, time_ms, err);
    if (k >= 0) {
        e.plan = c[k].plan;
        e.cfg = c[k].cfg;
        e.ws_bytes = c[k].ws_bytes;
        c[k].plan = c[k].cfg = NULL;
        at = table_add(t, &e);
        if (at < 0) {
            err_set(err, TT_ERR_RUNTIME, "out of host memory");
            destroy(&e.plan);
            destroy(&e.cfg);
        } else {
            *ws_bytes = e.ws_bytes;
        }
    }
    candidates_free(c, n);
    if (at < 0)
        graph_destroy(&e.g);
    return at;
}

int cg_table_execute(cg_table *t, cudnnHandle_t h, int plan, const cg_ptrs *p, void *ws,
                     tt_err *err)
{
    if (plan < 0 || plan >= t->n)
        return err_set(err, TT_ERR_RUNTIME, "cuDNN graph API: no plan %d", plan);
    return execute(h, t->e[plan].plan, p, ws, err);
}

int cg_table_time(cg_table *t, cudnnHandle_t h, cudaStream_t st, int plan, const cg_ptrs *p,
                  void *ws, int reps, float *ms, tt_err *err)
{
    if (plan < 0 || plan >= t->n)
        return err_set(err, TT_ERR_RUNTIME, "cuDNN graph API: no plan %d", plan);
    *ms = time_plan(h, st, t->e[plan].plan, p, ws, reps, 0.0f, err);
    return *ms == *ms ? 0 : -1;
}

/* ---- the backend's use of it (cuda_conv.c): the graph API's plan where it
 * is at least as fast as the legacy API's algorithm; the legacy API where
 * it has no plan, cannot run one, or TT_CUDNN_LEGACY=1 ---- */

static bool legacy_forced(void)
{
    return env_bit("TT_CUDNN_LEGACY") == 1; /* prec_check_env checked it */
}

static cg_spec backend_spec(const cuda_impl *c, conv_pass pass, const window_desc *d,
                            cg_layout layout, const cg_ptrs *p)
{
    const void *ptrs[3] = {p->x, p->w, p->y};
    return cg_spec_make(pass, d, layout, c->prec, c->opt.tf32, c->opt.deterministic, ptrs);
}

/* one line per shape and pass that the legacy API runs for a reason */
static void log_legacy(const cuda_impl *c, const cg_spec *s, const char *why)
{
    const window_desc *d = &s->win;
    log_printf("cuda:%d: conv2d %s [%d, %d, %d, %d] x %d %dx%d/%d (%s %s): cuDNN legacy API (%s)\n",
               c->device, cg_pass_name(s->pass), d->n, d->c, d->h, d->w, d->f, d->k, d->k,
               d->stride, cg_dtype_name(s->dtype), cg_layout_name(s->layout), why);
}

const algo_choice *cuda_conv_graph_plan(cuda_impl *c, conv_pass pass, const window_desc *d,
                                        cg_layout layout, const cg_ptrs *p, void *ws,
                                        size_t limit, float legacy_ms)
{
    if (legacy_forced())
        return NULL;
    cg_spec s = backend_spec(c, pass, d, layout, p);
    algo_key key = cg_spec_key(&s);
    const algo_choice *found = algo_cache_find(c->algos, &key);
    if (found != NULL)
        return found->algo >= 0 ? found : NULL;
    algo_choice ch = {.algo = -1};
    if (cg_worth_trying(&s)) {
        if (c->graph_plans == NULL)
            c->graph_plans = cg_table_create();
        cg_search how = {.max_plans = CG_MAX_PLANS, .reps = 5};
        tt_err err = {0};
        size_t wsb = 0;
        float ms = 0.0f;
        int k = c->graph_plans == NULL ? err_set(&err, TT_ERR_RUNTIME, "out of host memory")
                                       : cg_table_build(c->graph_plans, c->cudnn, c->stream, &s,
                                                        &how, p, ws, limit, &wsb, &ms, &err);
        if (k < 0)
            log_legacy(c, &s, err.msg);
        else if (cg_prefer_graph(&s, ms, legacy_ms))
            ch = (algo_choice){.algo = k, .ws_bytes = wsb, .time_ms = ms};
        /* else the legacy API's algorithm is faster: it runs, silently */
    }
    if (algo_cache_put(c->algos, &key, &ch) != 0) {
        c->failed = true;
        err_set(&c->err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    return ch.algo >= 0 ? algo_cache_find(c->algos, &key) : NULL;
}

int cuda_conv_graph_run(cuda_impl *c, conv_pass pass, const window_desc *d, cg_layout layout,
                        const algo_choice *plan, const cg_ptrs *p, void *ws)
{
    tt_err err = {0};
    if (cg_table_execute(c->graph_plans, c->cudnn, plan->algo, p, ws, &err) == 0)
        return 0;
    /* this shape runs on the legacy API from now on */
    cg_spec s = backend_spec(c, pass, d, layout, p);
    algo_key key = cg_spec_key(&s);
    algo_choice legacy = {.algo = -1};
    log_legacy(c, &s, err.msg);
    if (algo_cache_put(c->algos, &key, &legacy) != 0) {
        c->failed = true;
        err_set(&c->err, TT_ERR_RUNTIME, "out of host memory");
    }
    return -1;
}
