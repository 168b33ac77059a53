libtowertrain_a_SOURCES += %reldir%/dataflow.h %reldir%/dataflow.c %reldir%/dataset.c \
	%reldir%/dataset_impl.h %reldir%/idx.c %reldir%/cifar10.c %reldir%/fake.c \
	%reldir%/augment.c %reldir%/augment.h
