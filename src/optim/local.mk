libtowertrain_a_SOURCES += %reldir%/optimizer.c %reldir%/optimizer.h

# The optimizers against float64 references and torch.optim (when python3 has torch).
check_PROGRAMS += tests/test_optim
tests_test_optim_SOURCES = tests/test_optim.c
TESTS += tests/test_optim
