libtowertrain_a_SOURCES += %reldir%/registry.c %reldir%/inference_runner.c \
	%reldir%/progress_bar.c %reldir%/throughput.c %reldir%/moving_average_summary.c \
	%reldir%/model_saver.c %reldir%/stat_saver.c \
	%reldir%/scheduled_hyperparam.c %reldir%/early_stop.c %reldir%/stat_monitor_param.c \
	%reldir%/stat_history.h %reldir%/estimated_time_left.c %reldir%/peak_memory.c \
	%reldir%/timeline.c %reldir%/timeline.h %reldir%/gpu_utilization.c
