"""bench/torch_peer.py - PyTorch at its best setting, for the bench scripts.

The peer of bench/compare_pytorch and bench/roofline: the same MLP
(784-256-256-10), LeNet-5 and ResNet-20 as models/*.cfg, momentum SGD, batch
128, trained in PyTorch on data already in memory (Fashion-MNIST for mlp and
lenet, random 3x32x32 images for resnet20), images/s over timed steps after
warm-up steps.

Two PyTorch builds, each a row of its own (peers()):
  PyTorch 2.15 from PyPI (torch TORCH_PIN, torchvision TORCHVISION_PIN), in a
    virtual environment the bench makes on first use and reuses after:
    $TT_BENCH_VENV, default ~/.cache/towertrain-bench-venv (outside the tree;
    about 5.5 GB with the CUDA wheels torch's Linux wheel depends on);
  Debian's python3-torch (1.13), /usr/bin/python3, while it is installed.

A benchmark that leaves the peer's fastest setting out misleads, so every
common setting is tried and the fastest wins. Stage 1, eager fp32:
  torch threads      1 and every core (torch.set_num_threads)
  OMP_WAIT_POLICY    PASSIVE and the default
  and where torch's BLAS is OpenBLAS (Debian's; PyPI's wheel uses MKL):
  OpenBLAS threads   1 and its default (OPENBLAS_NUM_THREADS)
  OPENBLAS_CORETYPE  as OpenBLAS detects it, and forced to the CPU's best
                     kernel family (from /proc/cpuinfo; skipped when equal)
Stage 2, where torch has torch.compile (2.x), at each model's stage-1
winner: every combination of
  torch.compile      none, mode "default", mode "max-autotune"
  channels_last      off, on (the convnets; the MLP has no images)
  bf16 autocast      off, on where the CPU has AVX512_BF16 or AMX (oneDNN's
                     bf16 path); a bf16 setting competes in the bf16 table
The first steps of a compiled model compile it: the warm-up's time beyond
that many steady steps is reported apart as compile time (cold: a fresh
Inductor cache per bench run, so the first round's figure) and left out of
images/s, as a user amortises it. A compiling process that runs past
COMPILE_BOUND_S seconds per model ($TT_COMPILE_BOUND, default 600) is
stopped, and the setting reported as not finished.

Environment variables are fixed at process start, so one process runs per
environment and setting. The first round tries every setting; later rounds
only each model's FINALISTS fastest of the first per precision, and the best
median over the rounds wins. Setting OPENBLAS_CORETYPE is fine here, never
in tests or CI.
"""
import atexit
import ctypes
import ctypes.util
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading

DATA = "/usr/share/datasets/fashion-mnist"
MODELS = ("mlp", "lenet", "resnet20")
# timed steps per model (after WARMUP steps): short, the rounds give the spread
STEPS = {"mlp": 300, "lenet": 120, "resnet20": 6}
WARMUP = {"mlp": 30, "lenet": 15, "resnet20": 2}
BATCH = 128
FINALISTS = 4  # settings per model and precision kept for the rounds after the first
TORCH_PIN, TORCHVISION_PIN = "2.15.0", "0.29.2"
VENV = os.environ.get("TT_BENCH_VENV") or os.path.expanduser("~/.cache/towertrain-bench-venv")
COMPILE_BOUND_S = int(os.environ.get("TT_COMPILE_BOUND", "600"))

# What a CPU without AVX-512 would run, on one that has it (bench/roofline/run
# --isa avx2): every library capped at AVX2 + FMA. ATen's kernels and
# Inductor's generated code (ATEN_CPU_CAPABILITY), oneDNN's convolutions
# and towertrain's oneDNN (ONEDNN_MAX_CPU_ISA), MKL's sgemm, which PyPI's
# torch calls for Linear (MKL_ENABLE_INSTRUCTIONS), OpenBLAS in Debian's
# torch and the roof (OPENBLAS_CORETYPE Haswell: AVX2 + FMA kernels), and
# towertrain's own kernels (TT_CPU_ISA).
ISA_CAPS = {"avx2": {"TT_CPU_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
                     "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                     "OPENBLAS_CORETYPE": "Haswell"}}
CAP_ENV = {}  # the cap in force (set_isa_cap), {} for none


def set_isa_cap(level):
    """Caps every later peer process (and this one's environment, which
    towertrain and the roof inherit) at `level`, a key of ISA_CAPS."""
    CAP_ENV.clear()
    CAP_ENV.update(ISA_CAPS[level])
    os.environ.update(CAP_ENV)

# One process: argv = models (comma list), torch thread counts (comma list),
# steps, warm-up steps, the stage-2 variant ("compile=MODE,cl=1,bf16=1",
# "" for eager fp32). Prints "model threads images/s compile-seconds" lines.
SCRIPT = r'''
import gzip, sys, time, numpy as np, torch, torch.nn as nn
models, thread_list = sys.argv[1].split(","), [int(t) for t in sys.argv[2].split(",")]
steps, warmup = eval(sys.argv[3]), eval(sys.argv[4])
var = dict(kv.split("=") for kv in sys.argv[5].split(",") if kv)
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
def train(name, x, y, threads):
    """images/s over the timed steps; compile seconds: the warm-up's time
    beyond that many steady steps (0 for eager, up to the noise)."""
    if threads > 0:  # 0: torch's own default
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = build(name)
    cl = var.get("cl") == "1" and name != "mlp"
    if cl:
        m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    fm = torch.compile(m, mode=var["compile"]) if var.get("compile") else m
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(x.shape[0])
    n = warmup[name] + steps[name]
    t_start = time.perf_counter()
    for s in range(n):
        if s == warmup[name]:
            t0 = time.perf_counter()
        i = perm[(s * B) %% (x.shape[0] - B):][:B]
        xb = x[i].contiguous(memory_format=torch.channels_last) if cl else x[i]
        opt.zero_grad()
        if var.get("bf16") == "1":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(fm(xb), y[i])
        else:
            loss = loss_fn(fm(xb), y[i])
        loss.backward()
        opt.step()
    t1 = time.perf_counter()
    step = (t1 - t0) / steps[name]
    return steps[name] * B / (t1 - t0), max(0.0, (t0 - t_start) - warmup[name] * step)
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
        rate, compile_s = train(name, x, y, threads)
        print(name, threads, rate, compile_s, flush=True)
''' % {"batch": BATCH, "data": DATA}


class Peer:
    """One PyTorch build: its interpreter, version, whether its BLAS is
    OpenBLAS (the OpenBLAS knobs matter) and whether it has torch.compile.
    settings: {label: Setting}, filled as round 1 finds them."""

    def __init__(self, name, python, version, openblas):
        self.name, self.python, self.version, self.openblas = name, python, version, openblas
        self.compiles = int(version.split(".")[0]) >= 2
        self.settings = {}


class Setting:
    def __init__(self, env, threads, variant="", precision="fp32"):
        self.env, self.threads, self.variant, self.precision = env, threads, variant, precision


def _probe(python):
    """(torch version, BLAS is OpenBLAS) of an interpreter, or None."""
    code = ("import torch, re; c = torch.__config__.show(); "
            "print(torch.__version__.split('+')[0], int('BLAS_INFO=mkl' not in c))")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                             timeout=300).stdout.split()
        return out[0], out[1] == "1"
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def pypi_python():
    """The bench venv's python with torch TORCH_PIN, made on first use:
    (path, None) or (None, why not)."""
    py = os.path.join(VENV, "bin", "python")
    got = _probe(py) if os.path.exists(py) else None
    if got and got[0] == TORCH_PIN:
        return py, None
    print("bench: making %s with torch %s and torchvision %s from PyPI (once; ~5.5 GB)"
          % (VENV, TORCH_PIN, TORCHVISION_PIN), file=sys.stderr, flush=True)
    try:
        subprocess.run(["/usr/bin/python3", "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "torch==" + TORCH_PIN,
                        "torchvision==" + TORCHVISION_PIN, "numpy", "pillow"], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return None, "PyTorch %s not installed in %s (%s)" % (TORCH_PIN, VENV, e)
    return py, None


def peers(models=MODELS):
    """([Peer], [why a peer is missing]): PyPI's PyTorch first, then Debian's."""
    out, why = [], []
    py, err = pypi_python()
    for name, python in (("PyTorch %s (PyPI)" % TORCH_PIN, py), ("Debian python3-torch",
                                                                 "/usr/bin/python3")):
        got = _probe(python) if python else None
        if got is None:
            why.append(err or "%s: no torch for %s" % (name, python))
            continue
        if name.startswith("Debian"):
            name = "PyTorch %s (Debian)" % got[0]
        out.append(Peer(name, python, got[0], got[1]))
    return out, why


def _cache_dir():
    """A fresh Inductor cache for this bench run (compile times are cold in
    round 1), removed at exit."""
    global _CACHE
    if _CACHE is None:
        _CACHE = tempfile.mkdtemp(prefix="tt-inductor-")
        atexit.register(shutil.rmtree, _CACHE, True)
    return _CACHE


_CACHE = None


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


def cpu_bf16():
    """Whether the CPU has a bf16 dot product (AVX512_BF16 or AMX): where
    oneDNN's bf16 is fast, so bf16 autocast is worth a try. Never under an
    ISA cap (AVX2 has no bf16 product)."""
    if CAP_ENV:
        return False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return False


def thread_counts():
    return sorted({1, os.cpu_count() or 1})


def stage1(peer):
    """{label: Setting} of stage 1 (eager fp32) for a peer."""
    coretypes = [("", None)]
    blas_threads = [("", None)]
    if peer.openblas and "OPENBLAS_CORETYPE" in CAP_ENV:  # the cap fixes the kernels
        blas_threads = [(", OpenBLAS 1 thread", "1"), (", OpenBLAS default threads", None)]
    elif peer.openblas:
        detected, best_family = openblas_detected(), best_kernel_family()
        coretypes = [(", OPENBLAS_CORETYPE detected (%s)" % (detected or "?"), None)]
        if best_family is not None and best_family != detected:
            coretypes.append((", OPENBLAS_CORETYPE forced %s" % best_family, best_family))
        blas_threads = [(", OpenBLAS 1 thread", "1"), (", OpenBLAS default threads", None)]
    out = {}
    for threads, (blas_label, blas), (wait_label, wait), (core_label, core) in itertools.product(
            thread_counts(), blas_threads, (("PASSIVE", "PASSIVE"), ("default", None)),
            coretypes):
        env = {}
        if blas:
            env["OPENBLAS_NUM_THREADS"] = blas
        if wait:
            env["OMP_WAIT_POLICY"] = wait
        if core:
            env["OPENBLAS_CORETYPE"] = core
        label = "torch threads %d, OMP_WAIT_POLICY %s%s%s" % (threads, wait_label, blas_label,
                                                               core_label)
        out[label] = Setting(env, threads)
    return out


def variants(model):
    """Stage 2's variants for a model: [(label suffix, variant, precision)]."""
    out = []
    for mode, cl, bf16 in itertools.product(("", "default", "max-autotune"), (0, 1), (0, 1)):
        if (cl and model == "mlp") or (bf16 and not cpu_bf16()) or not (mode or cl or bf16):
            continue
        words = (["torch.compile %s" % mode] if mode else []) + (["channels_last"] if cl else []) \
            + (["bf16 autocast"] if bf16 else [])
        var = ",".join(w for w in ("compile=" + mode if mode else "", "cl=1" if cl else "",
                                   "bf16=1" if bf16 else "") if w)
        out.append((", " + ", ".join(words), var, "bf16" if bf16 else "fp32"))
    return out


def _run(peer, models, threads, env_extra, variant="", steps=None):
    """One peer process: ({(model, threads): (images/s, compile s)}, its peak
    RSS in KiB, None or why it stopped early). A compiling one is bounded by
    COMPILE_BOUND_S per model."""
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS"):
        env.pop(k, None)
    env.update(CAP_ENV)
    env.update(env_extra)
    env["TORCHINDUCTOR_CACHE_DIR"] = _cache_dir()
    steps = steps or {m: STEPS[m] for m in models}
    bound = COMPILE_BOUND_S * len(models) * len(threads) if "compile" in variant else None
    with tempfile.TemporaryFile("w+") as errf:
        # a session of its own: a stop ends Inductor's compile workers too
        proc = subprocess.Popen([peer.python, "-c", SCRIPT, ",".join(models),
                                 ",".join(str(t) for t in threads), repr(steps), repr(WARMUP),
                                 variant], env=env, stdout=subprocess.PIPE, stderr=errf,
                                text=True, start_new_session=True)
        fired = []
        timer = threading.Timer(bound, lambda: fired.append(os.killpg(proc.pid, signal.SIGKILL))
                                ) if bound else None
        if timer:
            timer.start()
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stopped = None
        if timer:
            timer.cancel()
            if fired:
                stopped = "did not finish within %d s" % bound
        errf.seek(0)
        err = errf.read()
    rates = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4:
            rates[(f[0], int(f[1]))] = (float(f[2]), float(f[3]))
    if stopped is None and proc.returncode != 0:
        if not variant:
            raise subprocess.CalledProcessError(proc.returncode, peer.name, stderr=err)
        stopped = "failed: %s" % (err.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    return rates, usage.ru_maxrss, stopped


def one_round(peer, models, only=None, notes=None):
    """Round 1 (only None): stage 1, then stage 2 at each model's stage-1
    winner; later rounds: for each model only the labels in only[model].
    {(model, label): (images/s, compile s)}; why a setting stopped goes into
    notes {(model, label): text}."""
    res = {}
    todo = {}  # (env, variant) -> [(label, model, threads)]
    if only is None:
        peer.settings.update(stage1(peer))
        for label, st in stage1(peer).items():
            for m in models:
                todo.setdefault((tuple(sorted(st.env.items())), ""), []).append(
                    (label, m, st.threads))
    else:
        for m in models:
            for label in only[m]:
                st = peer.settings[label]
                todo.setdefault((tuple(sorted(st.env.items())), st.variant), []).append(
                    (label, m, st.threads))
    _run_todo(peer, todo, res, notes)
    if only is None and peer.compiles:
        todo = {}
        for m in models:
            win = max((r[0], lab) for (mm, lab), r in res.items() if mm == m)[1]
            for suffix, var, prec in variants(m):
                st = peer.settings[win]
                peer.settings[win + suffix] = Setting(st.env, st.threads, var, prec)
                todo.setdefault((tuple(sorted(st.env.items())), var), []).append(
                    (win + suffix, m, st.threads))
        _run_todo(peer, todo, res, notes)
    return res


def _run_todo(peer, todo, res, notes):
    for (env, var), items in todo.items():
        ms = [m for m in MODELS if any(m == mm for _, mm, _ in items)]
        rates, _, stopped = _run(peer, ms, sorted({t for _, _, t in items}), dict(env), var)
        for label, m, threads in items:
            if (m, threads) in rates:
                res[(m, label)] = rates[(m, threads)]
            elif notes is not None:
                notes[(m, label)] = stopped or "no result"


def finalists(first_round, peer, models, keep=FINALISTS):
    """After a first round over every setting, the `keep` fastest per model
    and precision: the later rounds run only those (the search would not fit
    the script's time on 2 cores otherwise; a setting 2x off the best in
    round one does not win)."""
    out = {}
    for m in models:
        out[m] = set()
        for prec in ("fp32", "bf16"):
            rates = sorted(((r[0], lab) for (mm, lab), r in first_round.items()
                            if mm == m and peer.settings[lab].precision == prec), reverse=True)
            out[m] |= {lab for _, lab in rates[:keep]}
    return out


def stock(peer, models):
    """PyTorch as installed, nothing set: {model: images/s}."""
    rates, _, _ = _run(peer, models, (0,), {})
    return {m: rates[(m, 0)][0] for m in models}


def best(rounds, peer, model, precision="fp32"):
    """Among the settings of a precision measured in every round, the one
    whose median is highest: (label, median images/s, (min, max), compile s
    of round 1), or None where there is none."""
    labels = {lab for r in rounds for (m, lab) in r
              if m == model and peer.settings[lab].precision == precision}
    labels = {lab for lab in labels if all((model, lab) in r for r in rounds)}
    if not labels:
        return None
    med = {lab: statistics.median(r[(model, lab)][0] for r in rounds) for lab in labels}
    win = max(med, key=med.get)
    vals = [r[(model, win)][0] for r in rounds]
    return win, med[win], (min(vals), max(vals)), rounds[0][(model, win)][1]


def compiled(rounds, peer, model):
    """Every torch.compile setting round 1 measured for a model, fastest
    first: [(label, images/s, compile s)] (one line each in the reports,
    winner or not: what compiling costs and gives)."""
    out = [(lab, r[0], r[1]) for (m, lab), r in rounds[0].items()
           if m == model and peer.settings[lab].variant.startswith("compile")] if rounds else []
    return sorted(out, key=lambda x: -x[1])


def compile_lines(rounds, peer, models, notes):
    """The report's lines on torch.compile: each compiled setting's round-1
    images/s and cold compile time, and those that did not finish."""
    lines = []
    for m in models:
        for lab, rate, cs in compiled(rounds, peer, m):
            lines.append("%s, %s: %s: %.0f images/s (round 1), compile %.0f s"
                         % (peer.name, m, lab, rate, cs))
    for (m, lab), why in sorted(notes.items()):
        lines.append("%s, %s: %s %s" % (peer.name, m, lab, why))
    return lines


def peak_rss_kib(peer, model, label):
    """Peak RSS of a process that trains only `model`, at setting `label`,
    for a few steps."""
    st = peer.settings[label]
    _, rss, _ = _run(peer, [model], (st.threads,), st.env, st.variant,
                     steps={model: max(2, STEPS[model] // 4)})
    return rss
