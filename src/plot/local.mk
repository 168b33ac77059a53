libtowertrain_a_SOURCES += %reldir%/plot.c %reldir%/plot.h
