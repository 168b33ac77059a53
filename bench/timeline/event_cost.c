/* event_cost.c - what one timing event costs on this GPU, the unit of a
 * device tower's timeline (a span's begin or end: cudaEventRecord on the
 * tower's stream, after the cudaSetDevice every towertrain CUDA call makes).
 * bench/timeline/run --device gpu multiplies the host's and the device's
 * time of one (summed) by the events a recorded step holds for its "direct"
 * column; the GPU kit builds it (tests/gpu/kit.sh).
 *
 * Prints "name value" lines, medians of 15 batches of 200 calls, the stream
 * drained between batches:
 *   record_ns          host time of cudaEventRecord, stream idle
 *   setdevice_ns       host time of cudaSetDevice to the current device
 *   record_in_work_ns  host time an event adds between 4-byte memsets (the
 *                      queue busy, as between a step's kernels)
 *   device_ns          device time an event adds between those memsets
 * Not a test: the numbers depend on the driver and the machine. */
#define PROBE_NAME "event_cost"
#include "probe.h"

#define BATCH 200
#define BATCHES 15

static cudaStream_t stream;
static cudaEvent_t ev[BATCH + 2];
static void *buf;

/* one batch: host ns per item; *dev_ms the device time from before the
 * first item to after the last (events 0 and BATCH + 1) */
static double batch(int memsets, int records, int setdevice, float *dev_ms)
{
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaEventRecord(ev[0], stream), "cudaEventRecord");
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) {
        if (setdevice)
            check(cudaSetDevice(0), "cudaSetDevice");
        if (memsets)
            check(cudaMemsetAsync(buf, 0, 4, stream), "cudaMemsetAsync");
        if (records)
            check(cudaEventRecord(ev[1 + i], stream), "cudaEventRecord");
    }
    double t1 = now_ns();
    check(cudaEventRecord(ev[BATCH + 1], stream), "cudaEventRecord");
    check(cudaEventSynchronize(ev[BATCH + 1]), "cudaEventSynchronize");
    check(cudaEventElapsedTime(dev_ms, ev[0], ev[BATCH + 1]), "cudaEventElapsedTime");
    return (t1 - t0) / BATCH;
}

int main(void)
{
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int i = 0; i < BATCH + 2; i++)
        check(cudaEventCreate(&ev[i]), "cudaEventCreate");
    check(cudaMalloc(&buf, 4), "cudaMalloc");
    float ms;
    batch(1, 1, 1, &ms); /* warm-up */

    double rec[BATCHES], setdev[BATCHES], work[BATCHES], work_ev[BATCHES];
    double dwork[BATCHES], dwork_ev[BATCHES];
    for (int b = 0; b < BATCHES; b++) { /* interleaved: the machine's drift cancels */
        rec[b] = batch(0, 1, 0, &ms);
        setdev[b] = batch(0, 0, 1, &ms);
        work[b] = batch(1, 0, 0, &ms);
        dwork[b] = (double)ms * 1e6 / BATCH;
        work_ev[b] = batch(1, 1, 0, &ms);
        dwork_ev[b] = (double)ms * 1e6 / BATCH;
    }
    printf("record_ns %.0f\n", median(rec, BATCHES));
    printf("setdevice_ns %.0f\n", median(setdev, BATCHES));
    printf("record_in_work_ns %.0f\n", median(work_ev, BATCHES) - median(work, BATCHES));
    printf("device_ns %.0f\n", median(dwork_ev, BATCHES) - median(dwork, BATCHES));
    return 0;
}
