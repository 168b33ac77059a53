libtowertrain_a_SOURCES += %reldir%/bench.c %reldir%/bench.h %reldir%/bench_table.c \
	%reldir%/bench_table.h
# --device gpu (NCCL): host code of the CUDA build, warnings as errors
if HAVE_CUDA
libttcuda_a_SOURCES += %reldir%/bench_gpu.c
else
libtowertrain_a_SOURCES += %reldir%/bench_gpu.c
endif
