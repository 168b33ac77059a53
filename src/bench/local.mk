libtowertrain_a_SOURCES += %reldir%/bench.c %reldir%/bench.h
