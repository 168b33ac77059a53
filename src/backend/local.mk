# The backends: one folder each. The CPU backend is always built; the CUDA
# backend's kernels when configure finds nvcc (else none.c answers "no GPU").
libtowertrain_a_SOURCES += %reldir%/backend.h %reldir%/math.h %reldir%/backends.c %reldir%/device_wait.c %reldir%/comm_queue.c \
	%reldir%/cpu/cpu.h %reldir%/cpu/cpu_isa.c %reldir%/cpu/cpu_isa.h %reldir%/cpu/cpu_backend.c %reldir%/cpu/gemm.c %reldir%/cpu/gemm.h \
	%reldir%/cpu/dense.c %reldir%/cpu/tile_gemm.c %reldir%/cpu/tile_gemm.h %reldir%/cpu/conv.c \
	%reldir%/cpu/conv_small.c %reldir%/cpu/simd_target.h %reldir%/cpu/bf16_io_avx2.h %reldir%/cpu/transpose.c %reldir%/cpu/transpose.h %reldir%/cpu/bf16_io.h \
	%reldir%/cpu/pool.c %reldir%/cpu/elementwise.c \
	%reldir%/cpu/batchnorm.c %reldir%/cpu/conv_dnnl.h %reldir%/cpu/bf16.c \
	%reldir%/cpu/conv_wino.c %reldir%/cpu/conv_wino.h
if HAVE_DNNL
libtowertrain_a_SOURCES += %reldir%/cpu/conv_dnnl.c %reldir%/cpu/dense_bf16.c \
	%reldir%/cpu/dnnl_util.c %reldir%/cpu/dnnl_util.h
endif
EXTRA_DIST += %reldir%/cpu/conv_dnnl.c %reldir%/cpu/dense_bf16.c %reldir%/cpu/dnnl_util.c \
	%reldir%/cpu/dnnl_util.h

# The CUDA backend. Its GPU-independent parts (memory pool, algorithm cache,
# staging ring, the staging on backend.h's queues and events) are plain C, built and unit-tested everywhere. The parts
# that call CUDA, cuBLAS and cuDNN are built when configure finds them, as
# a separate set of objects so that their host code compiles with warnings
# as errors; they go into libtowertrain.a with the rest. Without CUDA,
# none.c answers "built without CUDA".
libtowertrain_a_SOURCES += %reldir%/cuda/cuda_backend.h %reldir%/mem_pool.c \
	%reldir%/mem_pool.h %reldir%/cuda/algo_cache.c %reldir%/cuda/algo_cache.h \
	%reldir%/cuda/bn_nhwc_plan.c %reldir%/cuda/bn_nhwc_plan.h \
	%reldir%/cuda/sumsq_plan.c %reldir%/cuda/sumsq_plan.h \
	%reldir%/cuda/conv_graph_spec.c %reldir%/cuda/conv_graph_spec.h \
	%reldir%/staging_ring.c %reldir%/staging_ring.h %reldir%/staging.c %reldir%/staging.h \
	%reldir%/precision.c %reldir%/precision.h %reldir%/weight_copies.c %reldir%/weight_copies.h \
	%reldir%/cuda/cuda_device.c %reldir%/sim/sim_backend.c %reldir%/sim/sim_device.c %reldir%/sim/sim_queue.c %reldir%/sim/sim_comm.c %reldir%/sim/sim_blocked.c %reldir%/sim/sim_graph.c %reldir%/sim/sim_grad16.c %reldir%/sim/sim.h \
	%reldir%/sim/sim_queue_ops.h
CUDA_HOST_SOURCES = %reldir%/cuda/cuda_backend.c %reldir%/cuda/cuda_check.c \
	%reldir%/cuda/cuda_libs.c %reldir%/cuda/cuda_libs.h \
	%reldir%/cuda/cuda_copies.c %reldir%/cuda/cuda_conv.c %reldir%/cuda/cuda_conv_graph.c %reldir%/cuda/cuda_conv_graph.h \
	%reldir%/cuda/cuda_batchnorm.c %reldir%/cuda/cuda_queue.c %reldir%/cuda/cuda_graph.c \
	%reldir%/cuda/cuda_impl.h %reldir%/cuda/cuda_kernels.h %reldir%/cuda/cuda_grid.cuh \
	%reldir%/cuda/cuda_bn_nhwc.c %reldir%/cuda/cuda_bn_nhwc.h %reldir%/cuda/cuda_nhwc.c \
	%reldir%/cuda/cuda_nhwc_kernels.h
if HAVE_CUDA
noinst_LIBRARIES += libttcuda.a
libttcuda_a_SOURCES = $(CUDA_HOST_SOURCES) %reldir%/cuda/cuda_kernels.cu \
	%reldir%/cuda/cuda_bn_nhwc.cu %reldir%/cuda/cuda_nhwc_kernels.cu
libttcuda_a_CFLAGS = $(AM_CFLAGS) -Werror
libtowertrain_a_LIBADD = $(libttcuda_a_OBJECTS)
libtowertrain_a_DEPENDENCIES = $(libttcuda_a_OBJECTS)
else
libtowertrain_a_SOURCES += %reldir%/cuda/none.c
endif
EXTRA_DIST += $(CUDA_HOST_SOURCES) %reldir%/cuda/cuda_kernels.cu %reldir%/cuda/cuda_bn_nhwc.cu \
	%reldir%/cuda/cuda_nhwc_kernels.cu %reldir%/cuda/none.c

# The GPU-independent logic of the CUDA backend, on the CPU.
check_PROGRAMS += tests/test_mem_pool tests/test_algo_cache tests/test_staging_ring \
	tests/test_backend_math tests/test_cuda_libs tests/test_precision tests/test_bn_nhwc_plan \
	tests/test_sumsq_plan tests/test_conv_graph_spec tests/test_cuda_conv_graph
tests_test_bn_nhwc_plan_SOURCES = tests/test_bn_nhwc_plan.c
tests_test_sumsq_plan_SOURCES = tests/test_sumsq_plan.c
tests_test_conv_graph_spec_SOURCES = tests/test_conv_graph_spec.c
tests_test_cuda_conv_graph_SOURCES = tests/test_cuda_conv_graph.c
tests_test_mem_pool_SOURCES = tests/test_mem_pool.c
tests_test_algo_cache_SOURCES = tests/test_algo_cache.c
tests_test_staging_ring_SOURCES = tests/test_staging_ring.c
tests_test_backend_math_SOURCES = tests/test_backend_math.c
tests_test_cuda_libs_SOURCES = tests/test_cuda_libs.c
tests_test_precision_SOURCES = tests/test_precision.c
TESTS += tests/test_mem_pool tests/test_algo_cache tests/test_staging_ring \
	tests/test_backend_math tests/test_cuda_libs tests/test_precision tests/test_bn_nhwc_plan \
	tests/test_sumsq_plan tests/test_conv_graph_spec tests/test_cuda_conv_graph

# The towers' 16-bit weight copies, made once per step (weight_copies.h), on
# sim: the bits of converting at every call, one conversion a weight a step.
check_PROGRAMS += tests/test_weight_copies
tests_test_weight_copies_SOURCES = tests/test_weight_copies.c
TESTS += tests/test_weight_copies

# float32 NHWC activations on sim (TT_CUDA_LAYOUT=nhwc: tf32's layout to be)
# against NCHW within float32's precision.
check_PROGRAMS += tests/test_sim_nhwc_f32
tests_test_sim_nhwc_f32_SOURCES = tests/test_sim_nhwc_f32.c
TESTS += tests/test_sim_nhwc_f32

# The CPU backend's own operations and thread pool against float64 references.
check_PROGRAMS += tests/test_cpu_ops
tests_test_cpu_ops_SOURCES = tests/test_cpu_ops.c
TESTS += tests/test_cpu_ops

# The kernels with a variant per instruction-set level (cpu_isa.h) at every
# level this CPU has, against float64 references, deterministic per level.
check_PROGRAMS += tests/test_cpu_isa_kernels
tests_test_cpu_isa_kernels_SOURCES = tests/test_cpu_isa_kernels.c
TESTS += tests/test_cpu_isa_kernels

# The blocked layout between layers gives NCHW's bits (tower level).
check_PROGRAMS += tests/test_blocked_layout
tests_test_blocked_layout_SOURCES = tests/test_blocked_layout.c
TESTS += tests/test_blocked_layout
# The simulated GPU in the blocked layout (bf16 NHWC), and activation
# buffers shared by lifetime, bit for bit.
check_PROGRAMS += tests/test_sim_blocked
tests_test_sim_blocked_SOURCES = tests/test_sim_blocked.c
TESTS += tests/test_sim_blocked
# bf16 activation gradients on the simulated GPU: each operation is the
# float32-gradient one's result rounded, bit for bit; float64 references;
# tower level (bounds, bits twice, memory).
check_PROGRAMS += tests/test_sim_grad16
tests_test_sim_grad16_SOURCES = tests/test_sim_grad16.c
TESTS += tests/test_sim_grad16

# global_avgpool stays float32 in bf16 / fp16 on device (sim) towers.
check_PROGRAMS += tests/test_gap_precision
tests_test_gap_precision_SOURCES = tests/test_gap_precision.c
TESTS += tests/test_gap_precision

# The dense layers' matrix product: float64, an fmaf chain, any split.
check_PROGRAMS += tests/test_tile_gemm
tests_test_tile_gemm_SOURCES = tests/test_tile_gemm.c
TESTS += tests/test_tile_gemm

# precision bf16: dense and conv2d against float32, float64 and torch.autocast.
check_PROGRAMS += tests/test_bf16
tests_test_bf16_SOURCES = tests/test_bf16.c
TESTS += tests/test_bf16

# backend.h's queues, events and copies, and the staging on them (sim).
check_PROGRAMS += tests/test_staging
tests_test_staging_SOURCES = tests/test_staging.c
TESTS += tests/test_staging

# The simulated GPU's storage rounding, queue order and guards.
check_PROGRAMS += tests/test_sim
tests_test_sim_SOURCES = tests/test_sim.c
TESTS += tests/test_sim
# The simulated GPU's step capture and the updates reading a device block.
check_PROGRAMS += tests/test_sim_graph
tests_test_sim_graph_SOURCES = tests/test_sim_graph.c
TESTS += tests/test_sim_graph
