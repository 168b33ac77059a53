#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Lines printed before the log directory exists (the model table, say) are kept
 * here and written to log.log when it opens, so the file has everything. */
static FILE *log_file;
static bool log_quiet;
static char *pending;
static size_t pending_len;
/* log_tty drew a line it will draw over (the progress bar): a log line
 * clears it first rather than run on after it */
static bool tty_line_open;
/* prefetch workers log too (a corrupt image skipped) */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

int log_open(const char *path)
{
    log_close();
    log_file = fopen(path, "a");
    if (log_file == NULL)
        return -1;
    if (pending != NULL) {
        fwrite(pending, 1, pending_len, log_file);
        free(pending);
        pending = NULL;
        pending_len = 0;
    }
    fflush(log_file);
    return 0;
}

void log_close(void)
{
    if (log_file != NULL)
        fclose(log_file);
    log_file = NULL;
}

void log_set_quiet(bool quiet)
{
    log_quiet = quiet;
}

static void keep_pending(const char *s, size_t n)
{
    char *p = realloc(pending, pending_len + n);
    if (p == NULL)
        return; /* the console still got it */
    memcpy(p + pending_len, s, n);
    pending = p;
    pending_len += n;
}

void log_printf(const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
    pthread_mutex_lock(&log_lock);
    if (!log_quiet) {
        if (tty_line_open)
            fputs("\r\033[K", stdout);
        tty_line_open = false;
        fwrite(buf, 1, len, stdout);
        fflush(stdout);
    }
    if (log_file != NULL) {
        fwrite(buf, 1, len, log_file);
        fflush(log_file);
    } else {
        keep_pending(buf, len);
    }
    pthread_mutex_unlock(&log_lock);
}

void log_tty(const char *fmt, ...)
{
    if (log_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_lock);
    vfprintf(stdout, fmt, ap);
    fflush(stdout);
    tty_line_open = true;
    pthread_mutex_unlock(&log_lock);
    va_end(ap);
}

/* Under mpirun a rank's standard output is Open MPI's pseudo-terminal
 * whatever mpirun's own output is (a file, a pipe): it is a terminal only to
 * isatty. A rank cannot see where mpirun writes, so under mpirun
 * (OMPI_COMM_WORLD_SIZE set) it draws no bar, and a file of its output holds
 * no carriage returns or escape codes. */
bool log_stdout_is_tty(void)
{
    return isatty(STDOUT_FILENO) == 1 && getenv("OMPI_COMM_WORLD_SIZE") == NULL;
}
