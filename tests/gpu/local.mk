# GPU tests (tests/gpu/): built everywhere, each check a visible SKIP where no
# GPU is present; tests/gpu/run.sh runs them on a GPU machine.
check_PROGRAMS += tests/gpu/test_gpu_ops
tests_gpu_test_gpu_ops_SOURCES = tests/gpu/test_gpu_ops.c
tests_gpu_test_gpu_ops_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
TESTS += tests/gpu/test_gpu_ops
check_PROGRAMS += tests/gpu/test_gpu_precision
tests_gpu_test_gpu_precision_SOURCES = tests/gpu/test_gpu_precision.c
tests_gpu_test_gpu_precision_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
TESTS += tests/gpu/test_gpu_precision
TESTS += tests/gpu/e2e_gpu.sh tests/gpu/e2e_gpu_precision.sh
EXTRA_DIST += tests/gpu/e2e_gpu.sh tests/gpu/e2e_gpu_precision.sh tests/gpu/run.sh
