libtowertrain_a_SOURCES += %reldir%/safetensors.c %reldir%/safetensors.h \
	%reldir%/checkpoint.c %reldir%/checkpoint.h
check_PROGRAMS += tests/test_safetensors
tests_test_safetensors_SOURCES = tests/test_safetensors.c
TESTS += tests/test_safetensors
