#!/bin/sh
# tests/gpu/e2e_gpu_trainers.sh on a simulated GPU (TT_DEVICE=sim, tt_lib.sh's
# tt_device), so that make check runs it without a GPU.
TT_DEVICE=sim exec sh "$(dirname "$0")/gpu/e2e_gpu_trainers.sh"
