# eval: `towertrain eval`, a checkpoint over a labelled dataflow (towertrain(1)).
libtowertrain_a_SOURCES += %reldir%/eval.c %reldir%/eval.h
TESTS += tests/e2e_eval.sh
EXTRA_DIST += tests/e2e_eval.sh
