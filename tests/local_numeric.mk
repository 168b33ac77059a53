# Numerical tests of the CPU backend, the layers, the model and the optimizers
# against float64 references (and torch.optim when python3 has torch).
check_PROGRAMS += tests/test_layer_grads tests/test_cpu_ops tests/test_optimizers
tests_test_layer_grads_SOURCES = tests/test_layer_grads.c
tests_test_cpu_ops_SOURCES = tests/test_cpu_ops.c
tests_test_optimizers_SOURCES = tests/test_optimizers.c
TESTS += tests/test_layer_grads tests/test_cpu_ops tests/test_optimizers
