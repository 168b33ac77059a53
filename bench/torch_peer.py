"""bench/torch_peer.py - PyTorch at its best setting, for the bench scripts.

The peer of bench/compare_pytorch and bench/roofline: the same MLP
(784-256-256-10), LeNet-5 and ResNet-20 as models/*.cfg, momentum SGD, batch
128, trained in PyTorch on data already in memory (Fashion-MNIST for mlp and
lenet, random 3x32x32 images for resnet20), images/s over timed steps after
warm-up steps.

A benchmark that leaves the peer's fastest setting out misleads, so every
common setting is tried and the fastest wins:
  torch threads      1 and 2 (torch.set_num_threads)
  OpenBLAS threads   1 and its default (OPENBLAS_NUM_THREADS)
  OMP_WAIT_POLICY    PASSIVE and the default
  OPENBLAS_CORETYPE  as OpenBLAS detects it, and forced to the CPU's best
                     kernel family (from /proc/cpuinfo; skipped when equal)
Environment variables are fixed at process start, so one process runs per
environment and tries both torch thread counts for every model inside. The
first round tries all 16 settings; later rounds only each model's
FINALISTS fastest of the first, and the best median over the rounds wins.
Setting OPENBLAS_CORETYPE is fine here, never in tests or CI.
"""
import ctypes
import ctypes.util
import itertools
import os
import statistics
import subprocess
import sys

DATA = "/usr/share/datasets/fashion-mnist"
MODELS = ("mlp", "lenet", "resnet20")
# timed steps per model (after WARMUP steps): short, the rounds give the spread
STEPS = {"mlp": 300, "lenet": 120, "resnet20": 6}
WARMUP = {"mlp": 30, "lenet": 15, "resnet20": 2}
BATCH = 128
FINALISTS = 4  # settings per model kept for the rounds after the first

# One process: argv = models (comma list), torch thread counts (comma list),
# "rss" to run only the first model at the first thread count (its peak RSS
# is then that model's alone). Prints "model threads images/s" lines.
SCRIPT = r'''
import gzip, sys, time, numpy as np, torch, torch.nn as nn
models, thread_list = sys.argv[1].split(","), [int(t) for t in sys.argv[2].split(",")]
steps, warmup = eval(sys.argv[3]), eval(sys.argv[4])
B = %(batch)d
def idx(path, off):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=off)
def fashion():
    # one float32 copy of the images (in-place arithmetic: peak RSS is the
    # data set once, as a user's TensorDataset would hold it)
    x = idx("%(data)s/train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32)
    x /= 255; x -= 0.286; x /= 0.353
    y = idx("%(data)s/train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)
class Block(nn.Module):
    """ResNet-20's basic block, projection shortcut where the shape changes."""
    def __init__(self, i, o, stride):
        super().__init__()
        self.c1 = nn.Conv2d(i, o, 3, stride, 1, bias=False); self.b1 = nn.BatchNorm2d(o)
        self.c2 = nn.Conv2d(o, o, 3, 1, 1, bias=False); self.b2 = nn.BatchNorm2d(o)
        self.sc = None
        if stride != 1 or i != o:
            self.sc = nn.Sequential(nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))
    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.sc is None else self.sc(x)))
def build(name):
    if name == "resnet20":
        layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
        c = 16
        for o, stride in ((16, 1), (32, 2), (64, 2)):
            for b in range(3):
                layers.append(Block(c, o, stride if b == 0 else 1))
                c = o
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
        return nn.Sequential(*layers)
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10))
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))
fx = None
for name in models:
    if name == "resnet20":
        x, y = torch.rand(B * (steps[name] + warmup[name]), 3, 32, 32), None
        y = torch.randint(0, 10, (x.shape[0],))
    else:
        fx = fx or fashion()
        x, y = fx
        if name == "mlp":
            x = x.reshape(-1, 784)
    for threads in thread_list:
        if threads > 0:  # 0: torch's own default
            torch.set_num_threads(threads)
        torch.manual_seed(0)
        m = build(name)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        perm = torch.randperm(x.shape[0])
        n = warmup[name] + steps[name]
        for s in range(n):
            if s == warmup[name]:
                t0 = time.perf_counter()
            i = perm[(s * B) %% (x.shape[0] - B):][:B]
            opt.zero_grad()
            loss_fn(m(x[i]), y[i]).backward()
            opt.step()
        print(name, threads, steps[name] * B / (time.perf_counter() - t0), flush=True)
''' % {"batch": BATCH, "data": DATA}


def openblas_detected():
    """The kernel family OpenBLAS picks on this CPU by itself, or None."""
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError, TypeError):
            continue
    return None


def best_kernel_family():
    """OpenBLAS's best kernel family for this CPU, from its flags."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return None
    if "avx512_bf16" in flags:
        return "Cooperlake"
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def settings():
    """{label: (environment, torch threads)} for every setting to try."""
    detected, best_family = openblas_detected(), best_kernel_family()
    coretypes = [("detected (%s)" % (detected or "?"), None)]
    if best_family is not None and best_family != detected:
        coretypes.append(("forced %s" % best_family, best_family))
    out = {}
    for threads, (blas_label, blas), (wait_label, wait), (core_label, core) in itertools.product(
            (1, 2), (("1 thread", "1"), ("default threads", None)),
            (("PASSIVE", "PASSIVE"), ("default", None)), coretypes):
        env = {}
        if blas:
            env["OPENBLAS_NUM_THREADS"] = blas
        if wait:
            env["OMP_WAIT_POLICY"] = wait
        if core:
            env["OPENBLAS_CORETYPE"] = core
        label = "torch threads %d, OpenBLAS %s, OMP_WAIT_POLICY %s, OPENBLAS_CORETYPE %s" % (
            threads, blas_label, wait_label, core_label)
        out[label] = (env, threads)
    return out


def _run(models, threads, env_extra, steps=None):
    """One peer process: ({(model, threads): images/s}, its peak RSS in KiB)."""
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS"):
        env.pop(k, None)
    env.update(env_extra)
    steps = steps or {m: STEPS[m] for m in models}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, ",".join(models),
                             ",".join(str(t) for t in threads), repr(steps), repr(WARMUP)],
                            env=env, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, "PyTorch peer")
    rates = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3:
            rates[(f[0], int(f[1]))] = float(f[2])
    return rates, usage.ru_maxrss


def one_round(models, only=None):
    """Every setting once, or for each model only the labels in only[model]:
    {(model, setting label): images/s}. One process per environment runs the
    torch thread counts its settings need."""
    by_env = {}
    for label, (env, threads) in settings().items():
        wanted = [m for m in models if only is None or label in only[m]]
        if wanted:
            by_env.setdefault(tuple(sorted(env.items())), []).append((label, threads, wanted))
    res = {}
    for env, labels in by_env.items():
        ms = [m for m in models if any(m in w for _, _, w in labels)]
        rates, _ = _run(ms, sorted({t for _, t, _ in labels}), dict(env))
        for label, threads, wanted in labels:
            for model in wanted:
                res[(model, label)] = rates[(model, threads)]
    return res


def finalists(first_round, models, keep=FINALISTS):
    """After a first round over every setting, the `keep` fastest per model:
    the later rounds run only those (the search would not fit the script's
    time on 2 cores otherwise; a setting 2x off the best in round one does
    not win)."""
    out = {}
    for m in models:
        rates = sorted(((r, lab) for (mm, lab), r in first_round.items() if mm == m),
                       reverse=True)
        out[m] = {lab for _, lab in rates[:keep]}
    return out


def stock(models):
    """PyTorch as installed, nothing set: {model: images/s}."""
    rates, _ = _run(models, (0,), {})
    return {m: rates[(m, 0)] for m in models}


def best(rounds, model):
    """Among the settings measured in every round, the one whose median is
    highest: (label, median, (min, max))."""
    labels = {lab for r in rounds for (m, lab) in r if m == model}
    labels = {lab for lab in labels if all((model, lab) in r for r in rounds)}
    med = {lab: statistics.median(r[(model, lab)] for r in rounds) for lab in labels}
    win = max(med, key=med.get)
    vals = [r[(model, win)] for r in rounds if (model, win) in r]
    return win, med[win], (min(vals), max(vals))


def peak_rss_kib(model, label):
    """Peak RSS of a process that trains only `model`, at setting `label`,
    for a few steps."""
    env, threads = settings()[label]
    _, rss = _run([model], (threads,), env, steps={model: max(2, STEPS[model] // 4)})
    return rss


def torch_version():
    try:
        return subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
