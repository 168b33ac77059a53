libtowertrain_a_SOURCES += %reldir%/allreduce.c %reldir%/allreduce.h
check_PROGRAMS += tests/test_allreduce
tests_test_allreduce_SOURCES = tests/test_allreduce.c
TESTS += tests/test_allreduce
