libtowertrain_a_SOURCES += %reldir%/err.c %reldir%/err.h %reldir%/rng.h \
	%reldir%/log.c %reldir%/log.h %reldir%/fileio.c %reldir%/fileio.h \
	%reldir%/strutil.c %reldir%/strutil.h %reldir%/threadpool.c %reldir%/threadpool.h \
	%reldir%/crc32c.c %reldir%/crc32c.h %reldir%/trace.c %reldir%/trace.h %reldir%/cmdline.h \
	%reldir%/env.c %reldir%/env.h %reldir%/clock.h
check_PROGRAMS += tests/test_strutil
tests_test_strutil_SOURCES = tests/test_strutil.c
TESTS += tests/test_strutil
check_PROGRAMS += tests/test_env
tests_test_env_SOURCES = tests/test_env.c
TESTS += tests/test_env
check_PROGRAMS += tests/test_trace
tests_test_trace_SOURCES = tests/test_trace.c
TESTS += tests/test_trace
