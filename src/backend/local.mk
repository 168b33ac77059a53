# The backends: one folder each. The CPU backend is always built; the CUDA
# backend's kernels when configure finds nvcc (else none.c answers "no GPU").
libtowertrain_a_SOURCES += %reldir%/backend.h %reldir%/math.h %reldir%/backends.c \
	%reldir%/cpu/cpu.h %reldir%/cpu/cpu_backend.c %reldir%/cpu/gemm.c %reldir%/cpu/gemm.h \
	%reldir%/cpu/dense.c %reldir%/cpu/conv.c %reldir%/cpu/pool.c %reldir%/cpu/elementwise.c \
	%reldir%/cpu/batchnorm.c %reldir%/cpu/conv_dnnl.h %reldir%/cpu/bf16.c
if HAVE_DNNL
libtowertrain_a_SOURCES += %reldir%/cpu/conv_dnnl.c %reldir%/cpu/dense_bf16.c
endif
EXTRA_DIST += %reldir%/cpu/conv_dnnl.c %reldir%/cpu/dense_bf16.c
if HAVE_CUDA
libtowertrain_a_SOURCES += %reldir%/cuda/cuda_device.cu
else
libtowertrain_a_SOURCES += %reldir%/cuda/none.c
endif
EXTRA_DIST += %reldir%/cuda/cuda_device.cu %reldir%/cuda/none.c

# The CPU backend's own operations and thread pool against float64 references.
check_PROGRAMS += tests/test_cpu_ops
tests_test_cpu_ops_SOURCES = tests/test_cpu_ops.c
TESTS += tests/test_cpu_ops

# precision bf16: dense and conv2d against float32, float64 and torch.autocast.
check_PROGRAMS += tests/test_bf16
tests_test_bf16_SOURCES = tests/test_bf16.c
TESTS += tests/test_bf16
