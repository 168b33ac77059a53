/* log.h - what towertrain prints: to stdout and, once the log directory exists,
 * to <logdir>/log.log as well (towertrain(1), OUTPUT). Errors go to stderr through main. */
#ifndef TT_LOG_H
#define TT_LOG_H

#include <stdbool.h>
#include <stdio.h>

/* Lines printed before log_open are kept and written to the file when it opens. */
int log_open(const char *path);
void log_close(void);
void log_set_quiet(bool quiet);

/* Prints to stdout (unless quiet) and to log.log. */
void log_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes to the terminal only (the live progress bar), never to log.log. */
void log_tty(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool log_stdout_is_tty(void);

#endif
