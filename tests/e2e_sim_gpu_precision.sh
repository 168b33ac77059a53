#!/bin/sh
# tests/gpu/e2e_gpu_precision.sh on a simulated GPU (TT_DEVICE=sim, tt_lib.sh's
# tt_device), so that make check runs it without a GPU: bf16 and fp16 with
# sim's GPU rounding and fp16's loss scaling, on shorter runs.
TT_DEVICE=sim exec sh "$(dirname "$0")/gpu/e2e_gpu_precision.sh"
