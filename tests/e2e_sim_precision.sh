#!/bin/sh
# tests/gpu/test_gpu_precision (fp16's loss scaling in every trainer type:
# an injected overflow skips exactly one step; packs give one all-reduce's
# bits; bf16 trains) on simulated GPUs, so make check runs it without a GPU.
TT_DEVICE=sim exec "${TT_BUILDDIR:-.}/tests/gpu/test_gpu_precision"
