libtowertrain_a_SOURCES += %reldir%/model.c %reldir%/model.h
check_PROGRAMS += tests/test_fusion
tests_test_fusion_SOURCES = tests/test_fusion.c
TESTS += tests/test_fusion
check_PROGRAMS += tests/test_grad_ready
tests_test_grad_ready_SOURCES = tests/test_grad_ready.c
TESTS += tests/test_grad_ready
