libtowertrain_a_SOURCES += %reldir%/trainer.c %reldir%/trainer.h %reldir%/trainer_report.c %reldir%/tower_step.c \
	%reldir%/tower_params.c %reldir%/trainer_eval.c %reldir%/tower_threads.c \
	%reldir%/checkpointing.c %reldir%/shared_params.c %reldir%/shared_params.h \
	%reldir%/loss_scale.c %reldir%/loss_scale.h \
	%reldir%/tower_threads.h %reldir%/simple.c %reldir%/sync_replicated.c \
	%reldir%/sync_parameter_server.c %reldir%/async.c \
	%reldir%/device_towers.c %reldir%/device_towers.h %reldir%/device_spans.c %reldir%/device_spans.h \
	%reldir%/step_graph.c %reldir%/step_graph.h
check_PROGRAMS += tests/test_trainers
tests_test_trainers_SOURCES = tests/test_trainers.c
TESTS += tests/test_trainers
check_PROGRAMS += tests/test_no_alloc
tests_test_no_alloc_SOURCES = tests/test_no_alloc.c
TESTS += tests/test_no_alloc
# A device row's spans read back on the host clock, and the events
# trace_continue and trace_end_with_last share (sim).
check_PROGRAMS += tests/test_device_spans
tests_test_device_spans_SOURCES = tests/test_device_spans.c
TESTS += tests/test_device_spans
