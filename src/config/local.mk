# config: job and model files (towertrain.cfg(5)), one schema (schema_tables.c)
# drives validation, defaults, did-you-mean and man/towertrain.cfg.5.
libtowertrain_a_SOURCES += %reldir%/job.h %reldir%/job.c %reldir%/schema.h \
	%reldir%/schema.c %reldir%/schema_tables.h %reldir%/schema_tables.c \
	%reldir%/model_cfg.h %reldir%/model_check.h %reldir%/model_cfg.c %reldir%/cfg_write.c

check_PROGRAMS += tests/test_config
tests_test_config_SOURCES = tests/test_config.c
TESTS += tests/test_config tests/e2e_bad_input.sh tests/e2e_config_layers.sh
EXTRA_DIST += tests/e2e_bad_input.sh tests/e2e_config_layers.sh \
	tests/bad/allreduce_with_ps.cfg \
	tests/bad/bad_model_syntax.cfg \
	tests/bad/bad_optimizer_type.cfg \
	tests/bad/classes_mismatch.cfg \
	tests/bad/conv_kernel_too_large.cfg \
	tests/bad/dropout_rate_one.cfg \
	tests/bad/duplicate_layer.cfg \
	tests/bad/duplicate_towers.cfg \
	tests/bad/early_stop_no_monitor.cfg \
	tests/bad/every_k_both.cfg \
	tests/bad/later_input.cfg \
	tests/bad/learning_rate_zero.cfg \
	tests/bad/missing_batch_size.cfg \
	tests/bad/missing_dataflow.cfg \
	tests/bad/missing_model_file.cfg \
	tests/bad/model_classes_mismatch.cfg \
	tests/bad/model_conv_kernel_too_large.cfg \
	tests/bad/model_duplicate_layer.cfg \
	tests/bad/model_later_input.cfg \
	tests/bad/model_ok.cfg \
	tests/bad/model_syntax_error.cfg \
	tests/bad/model_unknown_layer_type.cfg \
	tests/bad/normalize_std_zero.cfg \
	tests/bad/nr_tower_zero.cfg \
	tests/bad/padding_overflow.cfg \
	tests/bad/pool_padding.cfg \
	tests/bad/ps_device_replicated.cfg \
	tests/bad/schedule_not_ascending.cfg \
	tests/bad/sgd_with_momentum.cfg \
	tests/bad/simple_two_towers.cfg \
	tests/bad/starting_after_max.cfg \
	tests/bad/syntax_error.cfg \
	tests/bad/unknown_callback.cfg \
	tests/bad/unknown_key.cfg \
	tests/bad/unknown_layer_type.cfg \
	tests/bad/unknown_monitor.cfg \
	tests/bad/unknown_nested_key.cfg \
	tests/bad/units_wrap.cfg \
	tests/bad/wrong_type.cfg
