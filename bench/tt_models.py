"""bench/tt_models.py - towertrain's side of bench/compare_pytorch and
bench/roofline: training the three models with the towertrain binary, and
counting what one training step of a model costs, from its model file.

Costs come from models/<name>.cfg (libconfig, read by the small parser
below), layer by layer, with towertrain's shape rules (towertrain.cfg(5), MODEL FILE):
  flops: conv2d and dense multiply-adds x 2, for forward, backward-data and
         backward-weights; backward-data is left out for a layer that reads
         the model input (no framework computes the data's gradient).
         Element-wise layers (batchnorm, pooling, relu, the loss, the
         optimizer) are memory traffic, not counted.
  activations: every layer output of a batch, float32 (a relu fused into
         the layer before it, as towertrain does, adds none).
  parameters: every float of the parameter block (batchnorm statistics too).
"""
import json
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH = 128


# ---- a libconfig reader, enough for model files ----

_TOKEN = re.compile(r'\s+|#[^\n]*|//[^\n]*|/\*.*?\*/|("(?:[^"\\]|\\.)*")|'
                    r'([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)|([A-Za-z_][-A-Za-z0-9_*]*)|'
                    r'([=:;,{}()\[\]])', re.S)


def _tokens(text):
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError("libconfig: cannot read at offset %d" % pos)
        pos = m.end()
        if m.group(1):
            yield ("str", json.loads(m.group(1)))
        elif m.group(2):
            v = m.group(2)
            yield ("num", float(v) if re.search(r"[.eE]", v) else int(v))
        elif m.group(3):
            yield ("name", m.group(3))
        elif m.group(4):
            yield ("op", m.group(4))


def libconfig_load(path):
    """The settings of a libconfig file as Python dicts and lists."""
    toks = list(_tokens(open(path).read()))
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else ("eof", None)

    def take():
        t = peek()
        pos[0] += 1
        return t

    def value():
        kind, v = take()
        if kind in ("str", "num"):
            return v
        if kind == "name" and v.lower() in ("true", "false"):
            return v.lower() == "true"
        if (kind, v) == ("op", "{"):
            return group("}")
        if kind == "op" and v in "([":
            close = ")" if v == "(" else "]"
            out = []
            while peek() != ("op", close):
                out.append(value())
                if peek() == ("op", ","):
                    take()
            take()
            return out
        raise ValueError("libconfig: unexpected %r" % (v,))

    def group(close):
        out = {}
        while peek() != ("op", close) and peek()[0] != "eof":
            kind, name = take()
            if kind != "name":
                raise ValueError("libconfig: expected a setting name, got %r" % (name,))
            take()  # = or :
            out[name] = value()
            if peek() in (("op", ";"), ("op", ",")):
                take()
        take()
        return out

    return group(None)


# ---- what one step costs ----

def layer_costs(path, batch=BATCH):
    """One dict a layer of the model file, in order: {'name', 'type',
    'out' (C, H, W), 'fwd', 'bwd_data', 'bwd_weights' (FLOPs at `batch`),
    'params', 'act_bytes' (its output, 0 for a fused relu)}."""
    cfg = libconfig_load(path)
    inp = cfg["input"]
    shapes = {-1: tuple(inp) if len(inp) == 3 else (inp[0], 1, 1)}
    layers = cfg["layers"]
    index = {l["name"]: i for i, l in enumerate(layers)}
    consumers = [0] * len(layers)
    srcs = []
    for i, l in enumerate(layers):
        names = l.get("inputs") or ([l["input"]] if "input" in l else None)
        s = [index[n] for n in names] if names else [i - 1]
        srcs.append(s)
        for j in s:
            if j >= 0:
                consumers[j] += 1
    out_list = []
    relu_out = set()
    for i, l in enumerate(layers):
        c, h, w = shapes[srcs[i][0]]
        t = l["type"]
        params = 0
        if t == "conv2d":
            k, s, p, f = l["kernel"], l.get("stride", 1), l.get("padding", 0), l["filters"]
            oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            out = (f, oh, ow)
            macs = f * oh * ow * c * k * k
            params = f * c * k * k + (f if l.get("bias", True) else 0)
        elif t == "dense":
            out = (l["units"], 1, 1)
            macs = c * h * w * l["units"]
            params = c * h * w * l["units"] + (l["units"] if l.get("bias", True) else 0)
        elif t in ("maxpool", "avgpool"):
            k, s, p = l["kernel"], l.get("stride", l["kernel"]), l.get("padding", 0)
            out, macs = (c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1), 0
        elif t == "global_avgpool":
            out, macs = (c, 1, 1), 0
        elif t == "flatten":
            out, macs = (c * h * w, 1, 1), 0
        else:  # relu, batchnorm, dropout, add: the input's shape
            out, macs = (c, h, w), 0
            if t == "batchnorm":
                params = 4 * c
        shapes[i] = out
        # towertrain fuses a relu into its only producer (model.c fuse_relus)
        src = srcs[i][0]
        fused = (t == "relu" and src >= 0 and consumers[src] == 1 and src not in relu_out and
                 layers[src]["type"] in ("dense", "conv2d", "batchnorm", "add"))
        if fused:
            relu_out.add(src)
        out_list.append({"name": l["name"], "type": t, "out": out, "fwd": 2 * batch * macs,
                         "bwd_data": 2 * batch * macs if srcs[i] != [-1] else 0,
                         "bwd_weights": 2 * batch * macs, "params": params,
                         "act_bytes": 0 if fused else batch * out[0] * out[1] * out[2] * 4})
    return out_list


def model_cost(path, batch=BATCH):
    """{'fwd', 'bwd_data', 'bwd_weights', 'flops' (their sum), 'flops_3fwd',
    'activation_bytes', 'param_bytes'} of one training step at `batch`."""
    ls = layer_costs(path, batch)
    fwd = sum(l["fwd"] for l in ls)
    bwd_data = sum(l["bwd_data"] for l in ls)
    return {"fwd": fwd, "bwd_data": bwd_data, "bwd_weights": fwd,
            "flops": 2 * fwd + bwd_data, "flops_3fwd": 3 * fwd,
            "activation_bytes": sum(l["act_bytes"] for l in ls),
            "param_bytes": 4 * sum(l["params"] for l in ls)}


# ---- running towertrain ----

JOBS = {
    "mlp": ("fashion_mnist_mlp.cfg", []),
    "lenet": ("fashion_mnist_lenet.cfg", []),
    # random images, no augmentation, one tower, 12 steps an epoch
    "resnet20": ("resnet20_fake.cfg", ['trainer.type="simple"', "trainer.nr_tower=1",
                                       "dataflow.batch_size=128",
                                       "dataflow.augment=()", "dataflow.source.size=%d" % (12 * BATCH)]),
}


def model_path(model):
    return os.path.join(ROOT, "models", model + ".cfg")


def fashion_mnist_sets(data):
    """--set values reading Fashion-MNIST's training set from directory
    data; none where data is empty (the jobs' own path)."""
    if not data:
        return []
    return ['dataflow.source={ type = "idx"; images = "%s/train-images-idx3-ubyte.gz"; '
            'labels = "%s/train-labels-idx1-ubyte.gz"; }' % (data, data)]


def data_sets(model):
    """fashion_mnist_sets of $TT_FASHION_MNIST (the GPU kit's copy) for the
    models that read it."""
    if model not in ("mlp", "lenet"):
        return []
    return fashion_mnist_sets(os.environ.get("TT_FASHION_MNIST", ""))


def towertrain_rate(binary, model, epochs=1, sets=(), env=None):
    """One warm-up epoch, then `epochs` measured (no validation): (images/s
    over the measured epochs, peak RSS in KiB); `env`: towertrain's
    environment (this one's where None)."""
    job, extra = JOBS[model]
    extra = list(extra) + data_sets(model)
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "log")
        cmd = [binary, "run", os.path.join(ROOT, "jobs", job), "--logdir", logdir, "--quiet",
               "--set", "max_epoch=%d" % (epochs + 1), "--set", 'callbacks=( "throughput" )',
               "--set", 'monitors=( "json" )']
        for s in list(extra) + list(sets):
            cmd += ["--set", s]
        proc = subprocess.Popen(cmd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise subprocess.CalledProcessError(code, cmd)
        stats = json.load(open(os.path.join(logdir, "stats.json")))
        rates = [e["throughput"] for e in stats[1:]]
        return sum(rates) / len(rates), usage.ru_maxrss
