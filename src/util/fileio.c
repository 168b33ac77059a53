#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

/* Test hook: TT_FAULT_WRITE=<n> makes the n-th atomic write (from 1) fail after
 * writing half its data, as a full disk would. Lets tests check that a failed
 * write leaves the previous file intact. */
static int fault_should_fail(void)
{
    static int count;
    const char *s = getenv("TT_FAULT_WRITE");
    if (s == NULL || *s == '\0')
        return 0;
    return ++count == atoi(s);
}

static int fsync_dir_of(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        strcpy(dir, ".");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof(dir))
            return -1;
        memcpy(dir, path, n);
        dir[n] = '\0';
        if (n == 0)
            strcpy(dir, "/");
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* A path the user gave that cannot be created or written: a directory that
 * is not there, not a directory, not writable, or a directory where a file
 * goes is the user's to fix (exit 2); anything else (a full disk) the
 * machine's (exit 1). */
static int path_error_code(int e)
{
    bool users = e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS || e == EISDIR ||
                 e == ENAMETOOLONG;
    return users ? TT_ERR_USAGE : TT_ERR_RUNTIME;
}

int file_write_atomic(const char *path, const void *data, size_t len, tt_err *err)
{
    char tmp[4200];
    int k = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (k < 0 || (size_t)k >= sizeof(tmp))
        return err_set(err, TT_ERR_RUNTIME, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { /* named as the user named it */
        int e = errno;
        return err_set(err, path_error_code(e), "%s: cannot write: %s", path, strerror(e));
    }
    const char *p = data;
    size_t left = len;
    int fail = fault_should_fail();
    if (fail)
        left = len / 2;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return err_set(err, TT_ERR_RUNTIME, "%s: write failed: %s", path, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fail) {
        close(fd);
        unlink(tmp);
        return err_set(err, TT_ERR_RUNTIME, "%s: write failed: %s (injected by TT_FAULT_WRITE)",
                       path, strerror(ENOSPC));
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return err_set(err, TT_ERR_RUNTIME, "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) { /* a directory in the file's place, say */
        int e = errno;
        unlink(tmp);
        return err_set(err, path_error_code(e), "%s: cannot write: %s", path, strerror(e));
    }
    if (fsync_dir_of(path) != 0)
        return err_set(err, TT_ERR_RUNTIME, "%s: fsync of directory failed: %s", path,
                       strerror(errno));
    return 0;
}

int file_read_all(const char *path, char **data, size_t *len, tt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return err_set(err, TT_ERR_USAGE, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2 + 1);
        if (bigger == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (buf == NULL)
        return err_set(err, TT_ERR_RUNTIME, "%s: out of memory", path);
    if (bad) {
        free(buf);
        return err_set(err, TT_ERR_RUNTIME, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int dir_create(const char *path, tt_err *err)
{
    char buf[4096];
    if (strlen(path) >= sizeof(buf))
        return err_set(err, TT_ERR_RUNTIME, "%s: path too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                int e = errno;
                return err_set(err, path_error_code(e), "cannot create %s: %s", buf,
                               strerror(e));
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, TT_ERR_USAGE, "%s: not a directory", path);
    return 0;
}

int path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

void dir_first_missing(const char *path, char *top, size_t n)
{
    top[0] = '\0';
    if (strlen(path) >= n || path_exists(path))
        return;
    snprintf(top, n, "%s", path);
    for (char *slash = strrchr(top, '/'); slash != NULL && slash != top; slash = strrchr(top, '/')) {
        *slash = '\0';
        if (path_exists(top)) {
            *slash = '/';
            return;
        }
    }
}

void dir_remove_made(const char *path, const char *top)
{
    char buf[4096];
    size_t top_len = strlen(top);
    if (top_len == 0 || strlen(path) >= sizeof(buf) || strncmp(path, top, top_len) != 0)
        return;
    strcpy(buf, path);
    while (strlen(buf) >= top_len && rmdir(buf) == 0) {
        char *slash = strrchr(buf, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
    }
}

/* The writer's pid of a "<name>.tmp.<pid>" file name, or 0. */
static long temp_writer_pid(const char *name)
{
    const char *tag = NULL;
    for (const char *p = strstr(name, ".tmp."); p != NULL; p = strstr(p + 1, ".tmp."))
        tag = p;
    if (tag == NULL || tag == name)
        return 0;
    const char *digits = tag + 5;
    char *end = NULL;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (*digits < '0' || *digits > '9' || *end != '\0' || errno != 0 || pid <= 0)
        return 0;
    return pid;
}

int dir_remove_dead_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = temp_writer_pid(e->d_name);
        /* a pid that answers (or that we may not signal) is a live process */
        if (pid == 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[4400];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || unlink(path) != 0)
            continue;
        log_printf("removed %s (%lld bytes), a temporary file left by process %ld, which is no "
                   "longer running\n", e->d_name, (long long)st.st_size, pid);
        removed++;
    }
    closedir(d);
    return removed;
}
