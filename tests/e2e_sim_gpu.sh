#!/bin/sh
# tests/gpu/e2e_gpu.sh on simulated GPUs (TT_DEVICE=sim, tt_lib.sh's
# tt_device), so that make check runs its every check, 2 devices and 2 MPI
# ranks included, without a GPU.
TT_DEVICE=sim exec sh "$(dirname "$0")/gpu/e2e_gpu.sh"
