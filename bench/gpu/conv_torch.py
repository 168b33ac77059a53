#!/usr/bin/env python3
"""conv_torch.py - PyTorch's times for bench/gpu/convbench's convolutions.

    conv_torch.py --shapes conv.json --json conv.json [--prec bf16,tf32,fp32]
                  [--only NAME] [--reps 20] [--budget SECONDS]

--shapes: a file convbench wrote (--json, with or without --dry-run): its
"shapes" [n, c, h, w, f, k, stride, pad, oh, ow]. Each shape, pass (forward,
backward data, backward filter: aten.convolution_backward with one output
asked) and precision runs as PyTorch at its best runs it: channels_last,
torch.backends.cudnn.benchmark = True (its algorithm search happens in the
warm-up), bf16 tensors (what autocast gives a conv), tf32 and fp32 with
cudnn.allow_tf32 on and off; on uniform [-1, 1) data, the median of --reps
cudaEvent timings. The results go into --json as "torch" (added to the
file when it exists, e.g. convbench's own JSON, which `convbench --summary`
then reads alone; written whole through a temporary file). Without a GPU:
one line, exit status 2.
"""
import argparse
import json
import os
import sys
import time

PASSES = ("fwd", "bwd-data", "bwd-filter")


def median_ms(fn, reps):
    import torch
    fn()
    fn()  # the first call runs cudnn.benchmark's search
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return t[reps // 2]


def pass_fn(kind, x, w, dy, stride, pad):
    import torch
    if kind == "fwd":
        return lambda: torch.nn.functional.conv2d(x, w, None, stride, pad)
    mask = [kind == "bwd-data", kind == "bwd-filter", False]
    return lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, mask)


def measure(shapes, precs, reps, budget, only):
    import torch
    torch.backends.cudnn.benchmark = True
    cl = torch.channels_last
    out, t0 = [], time.monotonic()
    for prec in precs:
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        torch.backends.cudnn.allow_tf32 = prec != "fp32"
        for s in shapes:
            if only and s["shape"] != only:
                continue
            n, c, h, w, f, k, stride, pad, oh, ow = s["dims"]
            rnd = lambda *d: (torch.rand(*d, device="cuda") * 2 - 1).to(dtype).contiguous(memory_format=cl)
            x, wt, dy = rnd(n, c, h, w), rnd(f, c, k, k), rnd(n, f, oh, ow)
            for kind in PASSES:
                if time.monotonic() - t0 > budget:
                    print("conv_torch.py: the budget (%.0f s) was spent after %d results" % (budget, len(out)))
                    return out
                ms = median_ms(pass_fn(kind, x, wt, dy, stride, pad), reps)
                gflop = 2.0 * n * f * oh * ow * c * k * k / 1e9
                print("%-4s %-24s %-10s %9.3f ms %7.1f TFLOP/s" % (prec, s["shape"], kind, ms, gflop / ms),
                      flush=True)
                out.append({"prec": prec, "shape": s["shape"], "pass": kind, "ms": ms,
                            "tflops": gflop / ms})
            del x, wt, dy
    return out


def main():
    ap = argparse.ArgumentParser(description="PyTorch's times for convbench's convolutions")
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--prec", default="bf16,tf32,fp32")
    ap.add_argument("--only")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=1e9)
    a = ap.parse_args()
    precs = a.prec.split(",")
    if any(p not in ("bf16", "tf32", "fp32") for p in precs) or not 1 <= a.reps <= 1000:
        print("conv_torch.py: --prec takes bf16, tf32, fp32; --reps 1..1000", file=sys.stderr)
        return 2
    try:
        shapes = json.load(open(a.shapes))["shapes"]
    except (OSError, ValueError, KeyError) as e:
        print("conv_torch.py: %s: no convbench shapes (%s)" % (a.shapes, e), file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("conv_torch.py: no GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    info = "torch %s, cuDNN %s, %s" % (torch.__version__, torch.backends.cudnn.version(),
                                       torch.cuda.get_device_name(0))
    print("conv_torch.py: %s; channels_last, cudnn.benchmark, median of %d" % (info, a.reps), flush=True)
    results = measure(shapes, precs, a.reps, a.budget, a.only)
    data = {}
    if os.path.exists(a.json):
        with open(a.json) as f:
            data = json.load(f)
    data["torch"] = results
    data["torch_info"] = info
    tmp = a.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
