/* gpu_utilization.c - mean utilisation (percent) of each GPU of the towers
 * over each epoch, as tensorpack's GPUUtilizationTracker: a thread samples
 * NVML's nvmlDeviceGetUtilizationRates every `interval` seconds from the
 * start of the epoch to its end; the scalars gpu_utilization/<device id>.
 *
 * NVML is loaded with dlopen (libnvidia-ml.so.1, or the file named by the
 * environment variable TT_NVML_LIBRARY), so towertrain has no link-time
 * dependency on the driver. Where it cannot be loaded, or the towers are
 * CPU towers, one line says so and nothing is recorded; training goes on.
 * Simulated towers (sim) sample only a library named by TT_NVML_LIBRARY:
 * their device ids are no GPU's, so this is the test path (a stand-in NVML,
 * tests/e2e_gpu_utilization.sh), never the machine's real GPUs. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libconfig.h>

#include "train/trainer.h"
#include "util/log.h"

/* NVML's types, as nvml.h declares them (the header is not needed to build) */
typedef int nvml_return;
typedef void *nvml_device;
typedef struct {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvml_utilization;

typedef struct {
    void *lib;
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    nvml_return (*handle_by_index)(unsigned int index, nvml_device *dev);
    nvml_return (*handle_by_bus)(const char *pci_bus_id, nvml_device *dev); /* may be NULL */
    nvml_return (*utilization)(nvml_device dev, nvml_utilization *u);

    double interval; /* seconds between samples */
    int n;           /* devices sampled */
    int ids[TT_MAX_TOWERS];
    nvml_device devs[TT_MAX_TOWERS];
    double sum[TT_MAX_TOWERS]; /* of the epoch's samples (the sampler's own until joined) */
    int64_t count[TT_MAX_TOWERS];

    pthread_t thread;
    bool running, stop;
    pthread_mutex_t lock;
    pthread_cond_t wake;
} gpu_util;

static void gpu_util_sample(gpu_util *g)
{
    for (int i = 0; i < g->n; i++) {
        nvml_utilization u;
        if (g->utilization(g->devs[i], &u) == 0) {
            g->sum[i] += u.gpu;
            g->count[i]++;
        }
    }
}

/* Samples at once, then every interval until told to stop. */
static void *gpu_util_main(void *arg)
{
    gpu_util *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        gpu_util_sample(g);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + until.tv_nsec * 1e-9 + g->interval;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        while (!g->stop && pthread_cond_timedwait(&g->wake, &g->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

static void gpu_util_join(gpu_util *g)
{
    if (!g->running)
        return;
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    g->running = false;
}

/* NULL with `why` when NVML cannot be used; the devices found otherwise */
static gpu_util *gpu_util_open(const char *path, const trainer_t *tr, char *why, size_t len)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(why, len, "cannot load NVML (%s)", dlerror());
        return NULL;
    }
    gpu_util *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        dlclose(lib);
        snprintf(why, len, "out of memory");
        return NULL;
    }
    g->lib = lib;
    *(void **)&g->init = dlsym(lib, "nvmlInit_v2");
    *(void **)&g->shutdown = dlsym(lib, "nvmlShutdown");
    *(void **)&g->handle_by_index = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&g->utilization = dlsym(lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&g->handle_by_bus = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml_return rc = -1;
    bool inited = false;
    if (g->init == NULL || g->shutdown == NULL || g->handle_by_index == NULL ||
        g->utilization == NULL)
        snprintf(why, len, "%s lacks NVML's functions", path);
    else if ((rc = g->init()) != 0)
        snprintf(why, len, "nvmlInit failed (NVML error %d)", rc);
    else
        inited = true;
    for (int t = 0; rc == 0 && t < tr->n_towers; t++) {
        int id = tr->job->trainer.towers[t], i = 0;
        while (i < g->n && g->ids[i] != id)
            i++;
        if (i < g->n)
            continue; /* towers sharing a device: one figure */
        /* NVML numbers the GPUs as the PCI bus does, CUDA by speed and
         * after CUDA_VISIBLE_DEVICES: a GPU's bus id names it for both */
        backend_device_info info = {0};
        tt_err ignored = {0};
        const backend_device_ops *dev = tr->backends[t]->dev;
        bool by_bus = g->handle_by_bus != NULL &&
                      dev->info(tr->backends[t], &info, &ignored) == 0 && info.pci_bus_id[0];
        if (by_bus ? g->handle_by_bus(info.pci_bus_id, &g->devs[i]) != 0
                   : g->handle_by_index((unsigned int)id, &g->devs[i]) != 0) {
            snprintf(why, len, "NVML has no device %d", id);
            rc = -1;
        }
        g->ids[g->n++] = id;
    }
    if (rc != 0) {
        if (inited)
            g->shutdown();
        dlclose(lib);
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->wake, NULL);
    return g;
}

static int gpu_util_before_train(callback_t *cb, trainer_t *tr, tt_err *err)
{
    (void)err;
    const backend_device_ops *dev = tr->backends[0]->dev;
    const char *env = getenv("TT_NVML_LIBRARY");
    char why[512] = "";
    if (dev == NULL)
        snprintf(why, sizeof(why), "the towers are not GPUs (%s)", tr->backends[0]->name);
    else if (strcmp(dev->kind, "cuda") != 0 && (env == NULL || *env == '\0'))
        snprintf(why, sizeof(why), "the towers are simulated GPUs (%s)", dev->kind);
    gpu_util *g = NULL;
    if (why[0] == '\0')
        g = gpu_util_open(env != NULL && *env != '\0' ? env : "libnvidia-ml.so.1", tr, why,
                          sizeof(why));
    if (g == NULL) {
        log_printf("gpu_utilization: %s; nothing recorded\n", why);
        return 0;
    }
    double interval = 0.2;
    if (cb->cfg->settings != NULL)
        config_setting_lookup_float((config_setting_t *)cb->cfg->settings, "interval", &interval);
    g->interval = interval;
    cb->state = g;
    return 0;
}

static int gpu_util_before_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    (void)tr;
    gpu_util *g = cb->state;
    if (g == NULL || g->running)
        return 0;
    memset(g->sum, 0, sizeof(g->sum));
    memset(g->count, 0, sizeof(g->count));
    g->stop = false;
    if (pthread_create(&g->thread, NULL, gpu_util_main, g) != 0)
        return err_set(err, TT_ERR_RUNTIME, "gpu_utilization: cannot start its thread");
    g->running = true;
    return 0;
}

/* every epoch's end (after the triggers, before the monitors write it) */
static int gpu_util_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    gpu_util *g = cb->state;
    if (g == NULL || !g->running)
        return 0;
    gpu_util_join(g);
    for (int i = 0; i < g->n; i++) {
        if (g->count[i] == 0)
            continue;
        char name[64];
        snprintf(name, sizeof(name), "gpu_utilization/%d", g->ids[i]);
        if (trainer_put_scalar(tr, name, g->sum[i] / (double)g->count[i], err) != 0)
            return -1;
    }
    return 0;
}

static void gpu_util_destroy(callback_t *cb)
{
    gpu_util *g = cb->state;
    if (g == NULL)
        return;
    gpu_util_join(g);
    g->shutdown();
    dlclose(g->lib);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->wake);
    free(g);
    cb->state = NULL;
}

const callback_ops callback_gpu_utilization_ops = {
    .type = "gpu_utilization",
    .before_train = gpu_util_before_train,
    .before_epoch = gpu_util_before_epoch,
    .after_epoch = gpu_util_after_epoch,
    .destroy = gpu_util_destroy,
};
