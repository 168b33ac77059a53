# GPU tests (tests/gpu/): built everywhere, each check a visible SKIP where no
# GPU is present. On a GPU machine with this tree and its build tools,
# tests/gpu/run.sh runs them through make check. On a lent GPU machine (the
# device tool: CUDA and PyTorch, but no build dependencies, 15 minutes),
# build the kit here and run it there in one call:
#   tests/gpu/kit.sh                      -> .gpu-kit/ (<= 56 MiB)
#   device run: command "sh .gpu-kit/run $OUT", carry [".gpu-kit"], timeout_s 360
# (the kit's run takes at most 5.5 minutes: with the machine's start that
# leaves time for one rerun; README.md, Hacking, says more).
check_PROGRAMS += tests/gpu/test_gpu_ops
tests_gpu_test_gpu_ops_SOURCES = tests/gpu/test_gpu_ops.c tests/gpu/tt_conv_graph.h
tests_gpu_test_gpu_ops_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
TESTS += tests/gpu/test_gpu_ops
check_PROGRAMS += tests/gpu/test_gpu_precision
tests_gpu_test_gpu_precision_SOURCES = tests/gpu/test_gpu_precision.c
tests_gpu_test_gpu_precision_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
TESTS += tests/gpu/test_gpu_precision
TESTS += tests/gpu/e2e_gpu.sh tests/gpu/e2e_gpu_precision.sh tests/gpu/e2e_gpu_trainers.sh
EXTRA_DIST += tests/gpu/e2e_gpu.sh tests/gpu/e2e_gpu_precision.sh tests/gpu/e2e_gpu_trainers.sh \
	tests/gpu/run.sh
# The GPU kit (tests/gpu/kit.sh): built and checked here, run on a GPU
# machine as .gpu-kit/run.
# (tests/gpu/e2e_kit.sh: in TESTS first, Makefile.am)
EXTRA_DIST += tests/gpu/e2e_kit.sh tests/gpu/kit.sh tests/gpu/kit_run.sh tests/gpu/kit_env.sh \
	tests/gpu/kit_towertrain.sh
clean-local: clean-gpu-kit
clean-gpu-kit:
	rm -rf .gpu-kit-build .gpu-kit-build-baseline
.PHONY: clean-gpu-kit
# bench/gpu/convbench (issue 36): ResNet-50's convolutions in every way the
# CUDA backend can run them; the kit runs it first. Built everywhere for
# its --dry-run (the shapes and FLOPs, checked against torchvision by
# tests/gpu/e2e_convbench.sh); the measurements need CUDA.
check_PROGRAMS += bench/gpu/convbench
bench_gpu_convbench_SOURCES = bench/gpu/convbench.c bench/gpu/convbench.h
if HAVE_CUDA
bench_gpu_convbench_SOURCES += bench/gpu/convbench_gpu.c
endif
EXTRA_DIST += bench/gpu/convbench_gpu.c bench/gpu/conv_torch.py
TESTS += tests/gpu/e2e_convbench.sh
EXTRA_DIST += tests/gpu/e2e_convbench.sh
