libtowertrain_a_SOURCES += %reldir%/dataflow.h %reldir%/dataflow.c %reldir%/dataset.c \
	%reldir%/dataset_impl.h %reldir%/idx.c %reldir%/cifar10.c %reldir%/fake.c \
	%reldir%/augment.c %reldir%/augment.h
check_PROGRAMS += tests/test_dataflow
tests_test_dataflow_SOURCES = tests/test_dataflow.c
TESTS += tests/test_dataflow
