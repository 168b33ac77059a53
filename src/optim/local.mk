libtowertrain_a_SOURCES += %reldir%/optimizer.c %reldir%/optimizer.h
