libtowertrain_a_SOURCES += %reldir%/allreduce.c %reldir%/allreduce.h %reldir%/dist.h \
	%reldir%/dist_watch.c
if HAVE_MPI
libtowertrain_a_SOURCES += %reldir%/dist_mpi.c
else
libtowertrain_a_SOURCES += %reldir%/dist_none.c
endif
EXTRA_DIST += %reldir%/dist_mpi.c %reldir%/dist_none.c
check_PROGRAMS += tests/test_allreduce
tests_test_allreduce_SOURCES = tests/test_allreduce.c
TESTS += tests/test_allreduce

# The all-reduce pack schedule (plain C, shared by the CPU and NCCL paths).
libtowertrain_a_SOURCES += %reldir%/pack_schedule.c %reldir%/pack_schedule.h
check_PROGRAMS += tests/test_pack_schedule
tests_test_pack_schedule_SOURCES = tests/test_pack_schedule.c
TESTS += tests/test_pack_schedule

# NCCL (GPU towers): host code of the CUDA build, with its warnings as errors.
libtowertrain_a_SOURCES += %reldir%/nccl_comm.h
if HAVE_CUDA
libttcuda_a_SOURCES += %reldir%/nccl_comm.c
else
libtowertrain_a_SOURCES += %reldir%/nccl_none.c
endif
EXTRA_DIST += %reldir%/nccl_comm.c %reldir%/nccl_none.c
