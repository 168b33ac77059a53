libtowertrain_a_SOURCES += %reldir%/layer.h %reldir%/layer.c %reldir%/pool_common.h \
	%reldir%/dense.c %reldir%/conv2d.c %reldir%/maxpool.c %reldir%/avgpool.c \
	%reldir%/global_avgpool.c %reldir%/relu.c %reldir%/dropout.c %reldir%/flatten.c
