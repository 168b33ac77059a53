libtowertrain_a_SOURCES += %reldir%/registry.c %reldir%/json.c %reldir%/scalar_printer.c %reldir%/events.c
