libtowertrain_a_SOURCES += %reldir%/dataflow.h %reldir%/dataflow.c %reldir%/dataset.c \
	%reldir%/dataset_impl.h %reldir%/idx.c %reldir%/cifar10.c %reldir%/fake.c \
	%reldir%/augment.c %reldir%/augment.h %reldir%/npy.c %reldir%/image_folder.c \
	%reldir%/image_decode.c %reldir%/image_decode.h %reldir%/pixels.c %reldir%/pixels.h
check_PROGRAMS += tests/test_dataflow
tests_test_dataflow_SOURCES = tests/test_dataflow.c
TESTS += tests/test_dataflow
# helpers of the tests below (not tests themselves)
check_PROGRAMS += tests/tt_samples tests/tt_augment
tests_tt_samples_SOURCES = tests/tt_samples.c
tests_tt_augment_SOURCES = tests/tt_augment.c
TESTS += tests/e2e_augment.sh tests/e2e_image_folder.sh tests/e2e_npy.sh
EXTRA_DIST += tests/e2e_npy.sh tests/e2e_augment.sh tests/augment_check.py tests/e2e_image_folder.sh \
	tests/image_folder_check.py
# bad job files of the new sources and augmentations (tests/e2e_bad_input.sh reads tests/bad/)
EXTRA_DIST += tests/bad/image_folder_channels.cfg tests/bad/rrc_scale_reversed.cfg \
	tests/bad/npy_layout_typo.cfg tests/bad/color_jitter_negative.cfg \
	tests/bad/color_jitter_channels.cfg tests/bad/eval_unknown_key.cfg \
	tests/bad/image_folder_missing_root.cfg
