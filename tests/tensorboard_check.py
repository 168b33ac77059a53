"""tensorboard_check.py - TensorBoard itself reads a towertrain run's log
directory (tests/e2e_tensorboard.sh; needs the venv of tests/tt_venv.sh).

  tensorboard_check.py LOGDIR

1. TensorBoard's EventAccumulator, on the directory (so every event file of
   a resumed run, in order, as one run): every scalar of stats.json (all
   but epoch_num and global_step, which are the x axis) is a tag, with the
   value of each epoch end at that epoch's global_step; the per-step scalars
   every every_k_steps steps, one series across the resume; a histogram of
   every parameter (checkpoint names and sizes) at each epoch end, its
   bucket counts adding up to the parameter's size.
2. TensorBoard's own server (`python -m tensorboard.main`, loopback, a port
   the system picks, bounded by timeout(1)): its HTTP API lists the run,
   the scalar and histogram tags, and serves the train_loss series with the
   same steps and values, then it is stopped.
Values are compared bit for bit as float32 (events store float32,
stats.json the double it came from)."""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.request

from tt_safetensors import load
from tt_tap import done, ok

EVERY_K = 5


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_accumulator(logdir, stats, params):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    # size_guidance 0: keep every event (the default samples 1,000 scalars)
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    want = {k for e in stats for k in e} - {"epoch_num", "global_step"}
    ok(want <= set(tags["scalars"]),
       "EventAccumulator: every scalar of stats.json is a tag (%s; tags %s)"
       % (sorted(want), sorted(tags["scalars"])))
    series = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags["scalars"]}
    bad = [(k, e["global_step"]) for e in stats for k in want
           if series.get(k, {}).get(e["global_step"]) != f32(e[k])]
    ok(not bad, "EventAccumulator: each one's value at every epoch end's global_step equals "
       "stats.json's (%d epochs; wrong: %s)" % (len(stats), bad[:5]))
    last = stats[-1]["global_step"]
    steps = sorted(series.get("train_loss", {}))
    every = list(range(EVERY_K, last + 1, EVERY_K))
    ok(steps == every, "EventAccumulator: train_loss every %d steps, one series across the "
       "resume's event files, steps %s" % (EVERY_K, steps))
    nsteps = [len(acc.Scalars(t)) for t in ("train_loss", "grad_norm", "learning_rate")
              if t in tags["scalars"]]
    ok(nsteps == [len(every)] * 3 and len(set(series["train_loss"].values())) > 1,
       "EventAccumulator: per-step train_loss, grad_norm and learning_rate, %d points each, no "
       "step twice (%s)" % (len(every), nsteps))
    ends = [e["global_step"] for e in stats]
    good = set(tags["histograms"]) == set(params)
    for name, size in params.items():
        hs = acc.Histograms(name) if name in tags["histograms"] else []
        good &= [h.step for h in hs] == ends
        good &= all(h.histogram_value.num == size and
                    sum(h.histogram_value.bucket) == size and
                    h.histogram_value.min <= h.histogram_value.max for h in hs)
    ok(good, "EventAccumulator: a histogram of every parameter (%d) at each epoch end %s, "
       "counts adding up to its size" % (len(params), ends))
    return series


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def check_server(logdir, stats, series):
    """TensorBoard's server: the run, the tags, the loss series."""
    err = open(os.path.join(os.path.dirname(logdir), "tensorboard.err"), "w+")
    proc = subprocess.Popen(["timeout", "120", sys.executable, "-m", "tensorboard.main",
                             "--logdir", logdir, "--host", "127.0.0.1", "--port", "0",
                             "--reload_interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=err)
    base, tags, deadline = None, {}, time.time() + 90
    try:
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if base is None:
                err.seek(0)
                m = re.search(r"http://127\.0\.0\.1:(\d+)/", err.read())
                base = m and "http://127.0.0.1:%s" % m.group(1)
                continue
            try:
                tags = get(base + "/data/plugin/scalars/tags").get(".", {})
            except OSError:
                continue
            if "train_loss" in tags:
                break
        ok(base is not None, "tensorboard serves the log directory on a loopback port (%s)"
           % base)
        if base is None:
            return
        runs = get(base + "/data/runs")
        ok(runs == ["."], "HTTP /data/runs: the one run '.' (%s)" % runs)
        ok(set(tags) == set(series), "HTTP scalar tags equal EventAccumulator's (%s)"
           % sorted(tags))
        loss = get(base + "/data/plugin/scalars/scalars?run=.&tag=train_loss") if tags else []
        got = {step: value for _, step, value in loss}
        ok(got == series.get("train_loss") and len(got) == len(loss),
           "HTTP train_loss series: %d points, the same steps and values" % len(loss))
        ends = {e["global_step"]: f32(e["train_loss"]) for e in stats}
        ok(all(got.get(s) == v for s, v in ends.items()),
           "HTTP train_loss at every epoch end equals stats.json's (%s)" % sorted(ends))
        hist = get(base + "/data/plugin/histograms/tags").get(".", {})
        ok(len(hist) > 0 and "fc0.weight" in hist, "HTTP histogram tags: %s" % sorted(hist))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        ok(rc in (0, -signal.SIGINT, 130), "tensorboard stopped (exit %s)" % rc)


def main():
    logdir = sys.argv[1]
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    ckpt = os.path.join(logdir, open(os.path.join(logdir, "checkpoint")).readline().strip())
    params = {k: v.size for k, v in load(ckpt)[0].items()}
    series = check_accumulator(logdir, stats, params)
    check_server(logdir, stats, series)
    done()


if __name__ == "__main__":
    main()
