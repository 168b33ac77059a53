#!/bin/sh
# tests/gpu/run.sh - every GPU test in one command, on a machine with GPUs:
#
#   tests/gpu/run.sh            build here (configure with CUDA) when needed, then test
#
# Runs the CUDA build's library check (test_cuda_libs), the precision table
# (test_precision), every backend operation against the CPU backend in each
# precision (tests/gpu/test_gpu_ops), fp16 loss scaling in every trainer type
# (tests/gpu/test_gpu_precision) and the end-to-end GPU runs
# (tests/gpu/e2e_gpu.sh, e2e_gpu_precision.sh) through make check, prints every
# check, and fails when one fails or when no GPU was seen (then every GPU
# check would only have been skipped). make check runs the same tests on any
# machine, where without a GPU they report SKIP. A GPU machine without this
# tree's build dependencies (a lent one) runs the kit instead:
# tests/gpu/kit.sh here, then .gpu-kit/run there (tests/gpu/local.mk).
set -u
cd "$(dirname "$0")/../.." || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -f Makefile ]; then
  { autoreconf -fi && ./configure -q; } || { echo "run.sh: configure failed"; exit 1; }
fi
grep -q '^#define HAVE_CUDA 1' config.h || {
  echo "run.sh: this build has no CUDA backend (configure found no nvcc/cuBLAS/cuDNN 9/NCCL)"; exit 1; }
make -j"$jobs" >/dev/null || { echo "run.sh: build failed"; exit 1; }
tests="tests/test_cuda_libs tests/test_precision tests/gpu/test_gpu_ops tests/gpu/test_gpu_precision tests/gpu/e2e_gpu.sh tests/gpu/e2e_gpu_precision.sh"
make -j"$jobs" check TESTS="$tests" >/dev/null 2>&1
for t in $tests; do
  echo "== $t"
  grep -E '^(ok|not ok|#)' "${t%.sh}.log" 2>/dev/null || grep -E '^(ok|not ok|#)' "$t.log"
done
sed -n '/^# TOTAL/,/^# ERROR/p' test-suite.log
if grep -q 'SKIP no GPU here\|(no GPU:' tests/gpu/*.log; then
  echo "run.sh: no GPU was visible: the GPU checks were skipped"
  exit 1
fi
grep -q '^# FAIL: *0$' test-suite.log && grep -q '^# ERROR: *0$' test-suite.log
