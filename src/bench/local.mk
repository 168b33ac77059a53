libtowertrain_a_SOURCES += %reldir%/bench.c %reldir%/bench.h
# --device gpu (NCCL): host code of the CUDA build, warnings as errors
if HAVE_CUDA
libttcuda_a_SOURCES += %reldir%/bench_gpu.c
else
libtowertrain_a_SOURCES += %reldir%/bench_gpu.c
endif
