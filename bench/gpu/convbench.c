/* convbench.c - ResNet-50's convolutions in every way the CUDA backend can
 * run them, beside PyTorch's (issue 36, GPU_SPEED step 0).
 *
 *   convbench [--batch N] [--prec bf16,tf32,fp32] [--variants all|V,V]
 *             [--only NAME] [--reps 20] [--budget SECONDS] [--json FILE]
 *   convbench --dry-run [--batch N] [--json FILE]    the shapes and FLOPs, no GPU
 *   convbench --summary conv.json [torch.json]       the table beside PyTorch's
 *
 * The shapes: torchvision's resnet50 on 224x224 images (the stride on the
 * 3x3 convolution), its 53 convolutions reduced to the distinct ones, each
 * named after its first layer. For each precision (bf16 first), shape, pass
 * (forward, backward data, backward filter) and variant (convbench.h), the
 * median of --reps cudaEvent timings on random data; a table with TFLOP/s
 * on stdout and, with --json, every result. --budget stops measuring when
 * that many seconds are spent, saying so. conv_torch.py times PyTorch on
 * the same shapes (channels_last, cudnn.benchmark) and adds its results to
 * the JSON file; --summary prints each shape's best variant against
 * PyTorch. Bad arguments: one line on stderr, exit status 2.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/gpu/convbench.h"

#define MAX_SHAPES 64

const char *const cb_variant_names[CB_VARIANTS] = {
    "legacy-default", "legacy-tensorop", "legacy-nhwc", "graph-heurA", "graph-auto",
    "graph-auto-nchw"};
const char *const cb_prec_names[CB_PRECS] = {"bf16", "tf32", "fp32"};
static const char *const pass_names[3] = {"fwd", "bwd-data", "bwd-filter"};

double cb_flops(const window_desc *d)
{
    return 2.0 * d->n * d->f * d->oh * d->ow * (double)d->c * d->k * d->k;
}

/* Adds a convolution to the distinct shapes (or counts it). */
static void add_conv(cb_shape *s, int *n, const char *name, int batch, int c, int hw, int f,
                     int k, int stride, int pad)
{
    int o = (hw + 2 * pad - k) / stride + 1;
    window_desc d = {.n = batch, .c = c, .h = hw, .w = hw, .f = f, .k = k, .stride = stride,
                     .pad = pad, .oh = o, .ow = o};
    for (int i = 0; i < *n; i++)
        if (memcmp(&s[i].d, &d, sizeof(d)) == 0) {
            s[i].count++;
            return;
        }
    snprintf(s[*n].name, sizeof(s[*n].name), "%s", name);
    s[*n].count = 1;
    s[*n].d = d;
    (*n)++;
}

/* torchvision's resnet50: stem 7x7/2, max pool, four stages of bottlenecks
 * (1x1, 3x3 with the stage's stride in the first block, 1x1 to 4x width;
 * the first block's 1x1 downsample), 224x224 input. */
static int resnet50_shapes(int batch, cb_shape *s)
{
    int n = 0, c = 64, hw = 56;
    static const int blocks[4] = {3, 4, 6, 3}, width[4] = {64, 128, 256, 512};
    add_conv(s, &n, "conv1", batch, 3, 224, 64, 7, 2, 3);
    for (int l = 0; l < 4; l++)
        for (int b = 0; b < blocks[l]; b++) {
            int stride = l > 0 && b == 0 ? 2 : 1, w = width[l], out = hw / stride;
            char name[40];
            snprintf(name, sizeof(name), "layer%d.%d.conv1", l + 1, b);
            add_conv(s, &n, name, batch, c, hw, w, 1, 1, 0);
            snprintf(name, sizeof(name), "layer%d.%d.conv2", l + 1, b);
            add_conv(s, &n, name, batch, w, hw, w, 3, stride, 1);
            snprintf(name, sizeof(name), "layer%d.%d.conv3", l + 1, b);
            add_conv(s, &n, name, batch, w, out, 4 * w, 1, 1, 0);
            if (b == 0) {
                snprintf(name, sizeof(name), "layer%d.%d.downsample.0", l + 1, b);
                add_conv(s, &n, name, batch, c, hw, 4 * w, 1, stride, 0);
            }
            c = 4 * w;
            hw = out;
        }
    return n;
}

static int usage(const char *why)
{
    fprintf(stderr, "convbench: %s (see the header of bench/gpu/convbench.c)\n", why);
    return 2;
}

typedef struct {
    int batch, reps;
    double budget;
    bool dry_run, prec[CB_PRECS], variant[CB_VARIANTS];
    const char *only, *json, *summary[2];
} options;

/* A comma list of names from table into on[]; -1 on an unknown one. */
static int parse_list(const char *arg, const char *const *table, int n, bool *on)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", arg);
    memset(on, 0, (size_t)n * sizeof(bool));
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int i = 0;
        if (strcmp(t, "all") == 0) {
            for (i = 0; i < n; i++)
                on[i] = true;
            continue;
        }
        while (i < n && strcmp(t, table[i]) != 0)
            i++;
        if (i == n)
            return -1;
        on[i] = true;
    }
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* One "--name value" option; 2 after saying why on stderr. */
static int set_option(options *o, const char *a, const char *v)
{
    int bad = 0, budget = 0;
    if (strcmp(a, "--batch") == 0)
        bad = parse_int(v, 1, 4096, &o->batch);
    else if (strcmp(a, "--reps") == 0)
        bad = parse_int(v, 1, 64, &o->reps);
    else if (strcmp(a, "--budget") == 0) {
        bad = parse_int(v, 1, 86400, &budget);
        o->budget = budget;
    } else if (strcmp(a, "--prec") == 0)
        bad = parse_list(v, cb_prec_names, CB_PRECS, o->prec);
    else if (strcmp(a, "--variants") == 0)
        bad = parse_list(v, cb_variant_names, CB_VARIANTS, o->variant);
    else if (strcmp(a, "--only") == 0)
        o->only = v;
    else if (strcmp(a, "--json") == 0)
        o->json = v;
    else if (strcmp(a, "--model") == 0)
        bad = strcmp(v, "resnet50") != 0;
    else {
        fprintf(stderr, "convbench: unknown option %s\n", a);
        return 2;
    }
    if (bad == 0)
        return 0;
    fprintf(stderr, "convbench: bad value '%s' for %s\n", v, a);
    return 2;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.batch = 128, .reps = 20, .budget = 1e9};
    for (int i = 0; i < CB_PRECS; i++)
        o->prec[i] = true;
    for (int i = 0; i < CB_VARIANTS; i++)
        o->variant[i] = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = true;
            continue;
        }
        if (strcmp(a, "--summary") == 0) {
            if (v == NULL)
                return usage("--summary needs conv.json");
            o->summary[0] = argv[++i];
            if (i + 1 < argc && argv[i + 1][0] != '-')
                o->summary[1] = argv[++i];
            continue;
        }
        if (v == NULL || strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "convbench: %s: %s\n", a,
                    v == NULL ? "an unknown option or one without its value"
                              : "unexpected argument");
            return 2;
        }
        i++;
        int rc = set_option(o, a, v);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static cJSON *shape_json(const cb_shape *s)
{
    const window_desc *d = &s->d;
    cJSON *o = cJSON_CreateObject();
    int dims[10] = {d->n, d->c, d->h, d->w, d->f, d->k, d->stride, d->pad, d->oh, d->ow};
    cJSON_AddStringToObject(o, "shape", s->name);
    cJSON_AddNumberToObject(o, "count", s->count);
    cJSON_AddItemToObject(o, "dims", cJSON_CreateIntArray(dims, 10));
    cJSON_AddNumberToObject(o, "gflop", cb_flops(d) / 1e9);
    return o;
}

/* Writes root to path (a temporary file renamed: never half a file). */
static int write_json(const char *path, cJSON *root)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    char *text = cJSON_Print(root);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    int rc = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    if (rc == 0 && rename(tmp, path) == 0)
        return 0;
    remove(tmp);
    fprintf(stderr, "convbench: cannot write %s\n", path);
    return -1;
}

static int dry_run(const options *o, const cb_shape *s, int n)
{
    int convs = 0;
    double total = 0;
    printf("%-24s %5s %4s %4s %5s %4s %2s %2s %2s %4s %9s\n", "shape", "count", "n", "c", "h=w",
           "f", "k", "s", "p", "o", "GFLOP/pass");
    for (int i = 0; i < n; i++) {
        const window_desc *d = &s[i].d;
        printf("%-24s %5d %4d %4d %5d %4d %2d %2d %2d %4d %9.3f\n", s[i].name, s[i].count, d->n,
               d->c, d->h, d->f, d->k, d->stride, d->pad, d->oh, cb_flops(d) / 1e9);
        convs += s[i].count;
        total += s[i].count * cb_flops(d);
    }
    printf("%d distinct shapes of %d convolutions; %.3f TFLOP per pass over the model\n", n,
           convs, total / 1e12);
    if (o->json == NULL)
        return 0;
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "shapes");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, shape_json(&s[i]));
    int rc = write_json(o->json, root);
    cJSON_Delete(root);
    return rc == 0 ? 0 : 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

#ifdef HAVE_CUDA
static cJSON *result_json(const cb_shape *s, int prec, int pass, int v, const cb_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prec", cb_prec_names[prec]);
    cJSON_AddStringToObject(o, "shape", s->name);
    cJSON_AddStringToObject(o, "pass", pass_names[pass]);
    cJSON_AddStringToObject(o, "variant", cb_variant_names[v]);
    cJSON_AddBoolToObject(o, "ok", r->ok);
    if (r->ok) {
        cJSON_AddNumberToObject(o, "ms", r->ms);
        cJSON_AddNumberToObject(o, "tflops", cb_flops(&s->d) / (r->ms * 1e-3) / 1e12);
        cJSON_AddNumberToObject(o, "ws_bytes", (double)r->ws_bytes);
        cJSON_AddNumberToObject(o, "algo", r->algo);
    } else {
        cJSON_AddStringToObject(o, "error", r->err);
    }
    return o;
}

/* One table row: a precision, shape and pass, each variant's time. */
static void measure_row(cb_gpu *g, const options *o, const cb_shape *s, int prec, int pass,
                        cJSON *arr)
{
    printf("%-4s %-24s %-10s", cb_prec_names[prec], s->name, pass_names[pass]);
    for (int v = 0; v < CB_VARIANTS; v++) {
        /* float data: TENSOR_OP math is DEFAULT's (TF32 where allowed) */
        if (!o->variant[v] || (v == CB_LEGACY_TENSOROP && prec != CB_BF16)) {
            printf(" %15s", "-");
            continue;
        }
        cb_result r;
        cb_gpu_measure(g, &s->d, (conv_pass)pass, (cb_prec)prec, (cb_variant)v, o->reps, &r);
        if (r.ok)
            printf(" %7.3f %7.1f", r.ms, cb_flops(&s->d) / (r.ms * 1e-3) / 1e12);
        else
            printf(" %15s", "failed");
        cJSON_AddItemToArray(arr, result_json(s, prec, pass, v, &r));
        if (!r.ok)
            fprintf(stderr, "convbench: %s %s %s %s: %s\n", cb_prec_names[prec], s->name,
                    pass_names[pass], cb_variant_names[v], r.err);
    }
    printf("\n");
    fflush(stdout);
}

static int measure(const options *o, const cb_shape *s, int n)
{
    char why[512] = "";
    cb_gpu *g = cb_gpu_open(s, n, why, sizeof(why));
    if (g == NULL) {
        fprintf(stderr, "convbench: %s\n", why);
        return 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "gpu", cb_gpu_describe(g));
    cJSON_AddNumberToObject(root, "batch", o->batch);
    cJSON_AddNumberToObject(root, "reps", o->reps);
    cJSON *shapes = cJSON_AddArrayToObject(root, "shapes");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(shapes, shape_json(&s[i]));
    cJSON *arr = cJSON_AddArrayToObject(root, "results");
    printf("convbench: %s, batch %d, median of %d runs: ms and TFLOP/s per variant\n",
           cb_gpu_describe(g), o->batch, o->reps);
    printf("%-4s %-24s %-10s", "prec", "shape", "pass");
    for (int v = 0; v < CB_VARIANTS; v++)
        printf(" %15s", cb_variant_names[v]);
    printf("\n");
    double t0 = now_s();
    int rows = 0, done = 0;
    for (int p = 0; p < CB_PRECS; p++)
        for (int i = 0; i < n; i++)
            for (int pass = 0; pass < 3; pass++) {
                if (!o->prec[p] || (o->only && strcmp(o->only, s[i].name) != 0))
                    continue;
                rows++;
                if (now_s() - t0 > o->budget)
                    continue;
                measure_row(g, o, &s[i], p, pass, arr);
                done++;
                /* after each row: a run stopped from outside keeps its results */
                if (o->json != NULL && write_json(o->json, root) != 0) {
                    cJSON_Delete(root);
                    cb_gpu_close(g);
                    return 1;
                }
            }
    if (done < rows)
        printf("convbench: the budget (%.0f s) was spent after %d of %d rows\n", o->budget, done,
               rows);
    cJSON_AddNumberToObject(root, "seconds", now_s() - t0);
    int rc = o->json != NULL ? write_json(o->json, root) : 0;
    cJSON_Delete(root);
    cb_gpu_close(g);
    return rc == 0 ? 0 : 1;
}

#endif

static cJSON *load_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "convbench: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 65536 > cap) {
            char *m = realloc(buf, cap = 2 * cap + 65536);
            if (m == NULL)
                break;
            buf = m;
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
    } while (got > 0);
    fclose(f);
    cJSON *root = NULL;
    if (buf != NULL) {
        buf[len] = '\0';
        root = cJSON_Parse(buf);
    }
    free(buf);
    if (root == NULL)
        fprintf(stderr, "convbench: %s is not JSON\n", path);
    return root;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The time of (prec, shape, pass) in arr for variant (NULL: any entry, as
 * PyTorch's have none); -1 when absent or failed. */
static double lookup_ms(const cJSON *arr, const char *prec, const char *shape, const char *pass,
                        const char *variant)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, arr)
    {
        if (strcmp(str_of(o, "prec"), prec) || strcmp(str_of(o, "shape"), shape) ||
            strcmp(str_of(o, "pass"), pass) || (variant && strcmp(str_of(o, "variant"), variant)))
            continue;
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "ms");
        return cJSON_IsNumber(ms) ? ms->valuedouble : -1.0;
    }
    return -1.0;
}

/* One row of the summary; adds count x its times to tot (today, best, torch). */
static void summary_row(const cJSON *res, const cJSON *torch, const char *prec, const char *shape,
                        int count, const char *pass, double tot[3])
{
    int best = -1;
    double ms[CB_VARIANTS];
    for (int v = 0; v < CB_VARIANTS; v++) {
        ms[v] = lookup_ms(res, prec, shape, pass, cb_variant_names[v]);
        if (ms[v] > 0 && (best < 0 || ms[v] < ms[best]))
            best = v;
    }
    if (best < 0)
        return;
    double t = lookup_ms(torch, prec, shape, pass, NULL), today = ms[CB_LEGACY_DEFAULT];
    printf("%-4s %-24s %-10s %9.3f %9.3f %-16s %9.3f", prec, shape, pass, today, ms[best],
           cb_variant_names[best], t);
    if (t > 0)
        printf(" %6.2fx %6.2fx", today > 0 ? t / today : 0.0, t / ms[best]);
    printf("\n");
    if (today > 0 && t > 0) {
        tot[0] += count * today;
        tot[1] += count * ms[best];
        tot[2] += count * t;
    }
}

/* The table of conv.json beside PyTorch's times (in conv.json's "torch",
 * or torch.json's); ratios are PyTorch's time over ours (> 1: faster). */
static int summary(const options *o)
{
    cJSON *a = load_json(o->summary[0]);
    cJSON *b = o->summary[1] ? load_json(o->summary[1]) : NULL;
    if (a == NULL || (o->summary[1] && b == NULL)) {
        cJSON_Delete(a);
        return 2;
    }
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(a, "results");
    const cJSON *torch = cJSON_GetObjectItemCaseSensitive(b ? b : a, "torch");
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(a, "shapes");
    printf("convbench summary: %s; ms; ratio = PyTorch's time / ours (today's, best)\n",
           str_of(a, "gpu"));
    printf("%-4s %-24s %-10s %9s %9s %-16s %9s %7s %7s\n", "prec", "shape", "pass", "today",
           "best", "best variant", "torch", "today", "best");
    for (int p = 0; p < CB_PRECS; p++) {
        double tot[3] = {0, 0, 0};
        const cJSON *s;
        cJSON_ArrayForEach(s, shapes)
        {
            const cJSON *count = cJSON_GetObjectItemCaseSensitive(s, "count");
            for (int pass = 0; pass < 3; pass++)
                summary_row(res, torch, cb_prec_names[p], str_of(s, "shape"),
                            cJSON_IsNumber(count) ? count->valueint : 1, pass_names[pass], tot);
        }
        if (tot[2] > 0)
            printf("%-4s all convolutions x count: today %.2f ms, best %.2f ms, PyTorch %.2f ms: "
                   "%.2fx today, %.2fx best\n", cb_prec_names[p], tot[0], tot[1], tot[2],
                   tot[2] / tot[0], tot[2] / tot[1]);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (o.summary[0] != NULL)
        return summary(&o);
    cb_shape s[MAX_SHAPES];
    int n = resnet50_shapes(o.batch, s);
    if (o.only != NULL) {
        int found = 0;
        for (int i = 0; i < n; i++)
            found |= strcmp(s[i].name, o.only) == 0;
        if (!found) {
            fprintf(stderr, "convbench: no shape named %s (--dry-run lists them)\n", o.only);
            return 2;
        }
    }
    if (o.dry_run)
        return dry_run(&o, s, n);
#ifdef HAVE_CUDA
    return measure(&o, s, n);
#else
    fprintf(stderr, "convbench: built without CUDA: only --dry-run and --summary\n");
    return 2;
#endif
}
