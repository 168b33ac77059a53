/* fileio.h - whole-file reads and atomic writes.
 *
 * file_write_atomic writes a temporary file in the same directory, fsyncs it,
 * renames it over the final name and fsyncs the directory: a crash leaves either
 * the old file or the new one, never a partial file under the final name.
 */
#ifndef TT_FILEIO_H
#define TT_FILEIO_H

#include <stddef.h>

#include "util/err.h"

int file_write_atomic(const char *path, const void *data, size_t len, tt_err *err);

/* Reads a whole file; *data is malloc'd with a terminating NUL after len bytes. */
int file_read_all(const char *path, char **data, size_t *len, tt_err *err);

/* mkdir -p; errors are TT_ERR_RUNTIME naming the path. */
int dir_create(const char *path, tt_err *err);

int path_exists(const char *path);

/* The first directory on the way to `path` that is not there yet, into top
 * (empty when all of it is): what dir_create will make, and what
 * dir_remove_made removes again when what was to go in it failed. */
void dir_first_missing(const char *path, char *top, size_t n);
/* Removes the empty directories from `path` up to and with `top` (as
 * dir_first_missing gave it; nothing when top is empty). */
void dir_remove_made(const char *path, const char *top);

/* file_write_atomic names its temporary file <name>.tmp.<pid>; a writer
 * killed mid-write (kill -9, power loss) leaves it behind. Removes, from dir,
 * the temporary files whose writer is no longer running (and only those: a
 * live process's stay) and logs each. Returns the number removed. */
int dir_remove_dead_temps(const char *dir);

#endif
