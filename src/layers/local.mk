libtowertrain_a_SOURCES += %reldir%/layer.h %reldir%/layer.c %reldir%/param_spec.c %reldir%/pool_common.h \
	%reldir%/dense.c %reldir%/conv2d.c %reldir%/maxpool.c %reldir%/avgpool.c \
	%reldir%/global_avgpool.c %reldir%/relu.c %reldir%/dropout.c %reldir%/flatten.c \
	%reldir%/batchnorm.c %reldir%/add.c

# Every layer, and a whole model, against float64 references and finite differences.
check_PROGRAMS += tests/test_layers
tests_test_layers_SOURCES = tests/test_layers.c
TESTS += tests/test_layers
