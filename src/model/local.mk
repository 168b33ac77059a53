libtowertrain_a_SOURCES += %reldir%/model.c %reldir%/model.h
