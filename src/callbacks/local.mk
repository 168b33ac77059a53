libtowertrain_a_SOURCES += %reldir%/registry.c %reldir%/inference_runner.c \
	%reldir%/progress_bar.c %reldir%/throughput.c %reldir%/moving_average_summary.c \
	%reldir%/model_saver.c %reldir%/stat_saver.c
