# End-to-end tests of the command (module tests sit in each module's local.mk).
TESTS += tests/e2e_run.sh
EXTRA_DIST += tests/e2e_run.sh tests/tt_test.h
TESTS += tests/e2e_bad_data.sh
EXTRA_DIST += tests/e2e_bad_data.sh
TESTS += tests/e2e_checkpoint.sh
EXTRA_DIST += tests/e2e_checkpoint.sh
TESTS += tests/e2e_torch.sh
EXTRA_DIST += tests/e2e_torch.sh
TESTS += tests/e2e_callbacks.sh
EXTRA_DIST += tests/e2e_callbacks.sh
TESTS += tests/e2e_events.sh
EXTRA_DIST += tests/e2e_events.sh
TESTS += tests/e2e_plot.sh
EXTRA_DIST += tests/e2e_plot.sh
TESTS += tests/e2e_bench.sh
EXTRA_DIST += tests/e2e_bench.sh
