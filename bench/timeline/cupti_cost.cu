/* cupti_cost.cu - what a step would pay for its kernels' device times from
 * CUPTI's activity records, set against the timing events device towers
 * record now (a timeline's "at most 5%" of a recorded step: towertrain(1)).
 * The GPU kit builds it (tests/gpu/kit.sh) and its runner runs it.
 *
 * A step is K kernels in a row on one stream, each spinning S microseconds
 * on the GPU: S = 0 is launch-bound (a small model's step, LeNet's), S > 0
 * device-bound. Three ways of running the same steps, each in a process of
 * its own (CUPTI, once enabled, stays in the process):
 *   plain   the kernels alone
 *   events  a timing event before each kernel and one after the last
 *           (K + 1 a step: a pass of K chained layer spans)
 *   cupti   CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL and EXTERNAL_CORRELATION
 *           enabled, an external correlation id pushed before each kernel
 *           and popped after it (how a kernel would be tied to its layer);
 *           the records are read after the steps, as the timeline's are
 * usage: cupti_cost [KERNELS [SPIN_US,... [ROUNDS]]]   (default 32 0,15 3)
 * runs `cupti_cost --child MODE K S` for every mode, spin and round,
 * interleaved, and prints per spin the median step time of each mode and
 * its overhead over plain (and the kernel records CUPTI delivered, which
 * must be K x the steps it traced). Exit status 1 and one line when a child
 * fails (no GPU); a cupti child without a working CUPTI says why and the
 * table shows "-" for it. CUPTI is opened with dlopen (libcupti.so.<CUDA major>: the
 * toolkit's or PyTorch's pip nvidia-cuda-cupti; the runner puts it on the
 * library path).
 * Not a test: the numbers depend on the driver and the machine. */
#define PROBE_NAME "cupti_cost"
#include "probe.h"

#include <cupti.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STEPS 200
#define BATCHES 5
#define MAX_MODES 3

static const char *const MODES[MAX_MODES] = {"plain", "events", "cupti"};

__global__ void spin(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

/* ---- CUPTI through dlopen ---- */
static struct {
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*push)(CUpti_ExternalCorrelationKind, uint64_t);
    CUptiResult (*pop)(CUpti_ExternalCorrelationKind, uint64_t *);
} cu;
static long long kernel_records;
static char cupti_soname[32]; /* libcupti.so.<the CUDA major this was built with> */

static void cupti_check(CUptiResult r, const char *what)
{
    if (r != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_cost: %s: CUPTI error %d\n", what, (int)r);
        exit(1);
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = (size_t)8 << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *r = NULL;
    while (cu.next_record(buffer, valid, &r) == CUPTI_SUCCESS)
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            kernel_records++;
    free(buffer);
}

/* NULL when CUPTI is open and recording kernels, else why not (the child
 * says so in one line and the table shows "-": plain and events still
 * count) */
static const char *cupti_open(void)
{
    static char why[160];
    void *h = dlopen(cupti_soname, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, sizeof(why), "%s", dlerror());
        return why;
    }
    *(void **)&cu.register_callbacks = dlsym(h, "cuptiActivityRegisterCallbacks");
    *(void **)&cu.enable = dlsym(h, "cuptiActivityEnable");
    *(void **)&cu.flush_all = dlsym(h, "cuptiActivityFlushAll");
    *(void **)&cu.next_record = dlsym(h, "cuptiActivityGetNextRecord");
    *(void **)&cu.push = dlsym(h, "cuptiActivityPushExternalCorrelationId");
    *(void **)&cu.pop = dlsym(h, "cuptiActivityPopExternalCorrelationId");
    if (!cu.register_callbacks || !cu.enable || !cu.flush_all || !cu.next_record || !cu.push ||
        !cu.pop) {
        snprintf(why, sizeof(why), "%s lacks an activity API function", cupti_soname);
        return why;
    }
    CUptiResult r = cu.register_callbacks(buffer_requested, buffer_completed);
    const char *what = "cuptiActivityRegisterCallbacks";
    if (r == CUPTI_SUCCESS && (r = cu.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS)
        what = "cuptiActivityEnable (kernel)";
    if (r == CUPTI_SUCCESS &&
        (r = cu.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) != CUPTI_SUCCESS)
        what = "cuptiActivityEnable (external correlation)";
    if (r == CUPTI_SUCCESS)
        return NULL;
    snprintf(why, sizeof(why), "%s: CUPTI error %d", what, (int)r);
    return why;
}

/* ---- one child: a mode, K kernels a step, S us each ---- */
static int child(int mode, int k, double spin_us)
{
    const char *why;
    if (mode == 2 && (why = cupti_open()) != NULL) {
        printf("no CUPTI: %s\n", why);
        return 0;
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)k + 1, sizeof(*ev));
    for (int i = 0; i <= k; i++)
        check(cudaEventCreate(&ev[i]), "cudaEventCreate");
    unsigned long long ns = (unsigned long long)(spin_us * 1000.0);
    double step_us[BATCHES], host_us[BATCHES];
    long long traced = 0;
    for (int b = -1; b < BATCHES; b++) { /* b = -1: the warm-up */
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        double t0 = now_ns() * 1e-3;
        for (int st = 0; st < STEPS; st++)
            for (int i = 0; i < k; i++) {
                if (mode == 1)
                    check(cudaEventRecord(ev[i], s), "cudaEventRecord");
                if (mode == 2)
                    cupti_check(cu.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                        (uint64_t)st * k + i),
                                "cuptiActivityPushExternalCorrelationId");
                spin<<<1, 1, 0, s>>>(ns);
                if (mode == 2) {
                    uint64_t id;
                    cupti_check(cu.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id),
                                "cuptiActivityPopExternalCorrelationId");
                }
                if (mode == 1 && i == k - 1)
                    check(cudaEventRecord(ev[k], s), "cudaEventRecord");
            }
        double t1 = now_ns() * 1e-3;
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        double t2 = now_ns() * 1e-3;
        check(cudaGetLastError(), "spin kernel");
        traced += (long long)STEPS * k;
        if (b >= 0) {
            step_us[b] = (t2 - t0) / STEPS;
            host_us[b] = (t1 - t0) / STEPS;
        }
        if (mode == 2) /* outside the timing, as the timeline reads after its steps */
            cupti_check(cu.flush_all(1), "cuptiActivityFlushAll");
    }
    printf("step_us %.3f host_us %.3f records %lld of %lld\n", median(step_us, BATCHES),
           median(host_us, BATCHES), mode == 2 ? kernel_records : 0LL,
           mode == 2 ? traced : 0LL);
    return 0;
}

int main(int argc, char **argv)
{
    snprintf(cupti_soname, sizeof(cupti_soname), "libcupti.so.%d", CUDART_VERSION / 1000);
    if (argc == 5 && strcmp(argv[1], "--child") == 0) {
        for (int m = 0; m < MAX_MODES; m++)
            if (strcmp(argv[2], MODES[m]) == 0)
                return child(m, atoi(argv[3]), atof(argv[4]));
        fprintf(stderr, "cupti_cost: unknown mode %s\n", argv[2]);
        return 2;
    }
    int k = argc > 1 ? atoi(argv[1]) : 32, rounds = argc > 3 ? atoi(argv[3]) : 3;
    const char *spins = argc > 2 ? argv[2] : "0,15";
    if (k < 1 || k > 4096 || rounds < 1 || rounds > 50) {
        fprintf(stderr, "cupti_cost: usage: cupti_cost [KERNELS 1-4096 [SPIN_US,... [ROUNDS 1-50]]]\n");
        return 2;
    }
    char list[256], self[3072];
    snprintf(list, sizeof(list), "%s", spins);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1); /* this program, not popen's shell */
    if (n <= 0) {
        fprintf(stderr, "cupti_cost: cannot read /proc/self/exe\n");
        return 1;
    }
    self[n] = '\0';
    printf("%-8s %8s %-7s %10s %10s %9s  %s\n", "spin us", "kernels", "mode", "step us",
           "host us", "overhead", "CUPTI kernel records");
    for (char *sv = strtok(list, ","); sv != NULL; sv = strtok(NULL, ",")) {
        double step[MAX_MODES][50], host[MAX_MODES][50];
        int got[MAX_MODES] = {0};
        char records[MAX_MODES][200] = {{0}};
        for (int r = 0; r < rounds; r++)
            for (int m = 0; m < MAX_MODES; m++) {
                char cmd[3400], line[256] = "";
                snprintf(cmd, sizeof(cmd), "'%s' --child %s %d %s", self, MODES[m], k, sv);
                FILE *p = popen(cmd, "r");
                if (p == NULL || fgets(line, sizeof(line), p) == NULL) {
                    if (p != NULL)
                        pclose(p);
                    fprintf(stderr, "cupti_cost: %s (spin %s us) printed nothing\n", MODES[m], sv);
                    return 1;
                }
                int rc = pclose(p);
                double su, hu;
                long long rec, of;
                if (sscanf(line, "step_us %lf host_us %lf records %lld of %lld", &su, &hu, &rec,
                           &of) == 4 && rc == 0) {
                    step[m][got[m]] = su;
                    host[m][got[m]++] = hu;
                    if (m == 2)
                        snprintf(records[m], sizeof(records[m]), "%lld of %lld", rec, of);
                } else if (strncmp(line, "no ", 3) == 0) {
                    line[strcspn(line, "\n")] = '\0'; /* (no strtok: it walks the spins) */
                    snprintf(records[m], sizeof(records[m]), "%.190s", line);
                } else {
                    fprintf(stderr, "cupti_cost: %s (spin %s us): %s", MODES[m], sv, line);
                    return 1;
                }
            }
        double plain = got[0] ? median(step[0], got[0]) : 0.0;
        for (int m = 0; m < MAX_MODES; m++) {
            if (got[m] == 0) {
                printf("%-8s %8d %-7s %10s %10s %9s  %s\n", sv, k, MODES[m], "-", "-", "-",
                       records[m]);
                continue;
            }
            double st = median(step[m], got[m]), hu = median(host[m], got[m]);
            printf("%-8s %8d %-7s %10.2f %10.2f %8.1f%%  %s\n", sv, k, MODES[m], st, hu,
                   plain > 0 ? 100.0 * (st / plain - 1.0) : 0.0, records[m]);
        }
    }
    printf("(medians of %d processes a mode, interleaved; %d steps x %d batches each; overhead: "
           "step time over plain's)\n", rounds, STEPS, BATCHES);
    return 0;
}
