/* image_folder.c - torchvision's ImageFolder layout: root/<class>/<image>.
 *
 * Classes are root's sub-directories in Python's sorted() order (class i = the
 * i-th name; byte order for UTF-8 names), as torchvision's find_classes; an
 * empty one keeps its index, so a training and a validation folder with the
 * same class names agree. A class's images
 * are its files ending in .jpg, .jpeg or .png (any case), in sub-directories
 * too, in the order of Python's sorted(os.walk(class_dir)) and sorted(files),
 * as torchvision's make_dataset. The list is read once, at open, with every
 * image's header (format, size), so a file that is not an image, is cut short
 * before its pixels, or has an unsupported size is found before anything is
 * written; with dataflow.limit, the headers of the first `limit` images only
 * (the others are never read). Pixels are decoded by image_folder_sample, in
 * the prefetch workers.
 *
 * skip_corrupt: files whose header does not read are left out at open, with a
 * count in the log. A file whose header reads but whose pixels do not decode
 * is found by the worker that decodes it; the next image in file order that
 * decodes stands in for it (so batches keep their size and the stream stays a
 * function of the seed), and the log names it once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataflow/dataset_impl.h"
#include "dataflow/image_decode.h"
#include "util/log.h"
#include "util/strutil.h"

#define PROBE_BYTES 65536
#define LOG_NAME_BYTES 2048 /* a name escaped for the log (cut beyond) */
#define MAX_DEPTH 32

typedef struct {
    size_t dir;     /* offset of the directory relative to root ("cat", "cat/sub") */
    size_t name;    /* offset of the file name */
    int32_t label;
    int32_t w, h;
} folder_entry;

struct image_folder {
    char root[4096];
    int channels;
    bool skip_corrupt;
    folder_entry *entries;
    size_t n, cap;
    char *names;    /* NUL-separated strings */
    size_t names_len, names_cap;
    int n_classes;
    size_t *class_name;   /* [n_classes]: offsets of the class folders' names */
    pthread_mutex_t lock; /* reported */
    uint8_t *reported;    /* [n] files a worker found corrupt */
};

static size_t add_name(struct image_folder *f, const char *s)
{
    size_t n = strlen(s) + 1;
    if (f->names_len + n > f->names_cap) {
        size_t cap = (f->names_cap + n) * 2;
        char *p = realloc(f->names, cap);
        if (p == NULL)
            return (size_t)-1;
        f->names = p;
        f->names_cap = cap;
    }
    memcpy(f->names + f->names_len, s, n);
    f->names_len += n;
    return f->names_len - n;
}

void image_folder_path(const struct dataset *ds, size_t i, char *out, size_t len)
{
    const struct image_folder *f = ds->folder;
    const folder_entry *e = &f->entries[i];
    snprintf(out, len, "%s/%s/%s", f->root, f->names + e->dir, f->names + e->name);
}

static bool has_image_extension(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png"};
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof(ext) / sizeof(ext[0]); k++) {
        size_t e = strlen(ext[k]);
        if (n > e && strcasecmp(name + n - e, ext[k]) == 0)
            return true;
    }
    return false;
}

/* torchvision reads these too (through PIL); say so rather than pass over
 * them in silence */
static bool has_other_image_extension(const char *name)
{
    static const char *const ext[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof(ext) / sizeof(ext[0]); k++) {
        size_t e = strlen(ext[k]);
        if (n > e && strcasecmp(name + n - e, ext[k]) == 0)
            return true;
    }
    return false;
}

/* The next character of a file name as Python's os functions decode it
 * (UTF-8; a byte that is not part of a well-formed sequence as U+DC00 + the
 * byte: surrogateescape), and its length in bytes. */
static uint32_t name_char(const unsigned char *s, int *len)
{
    int n = str_utf8_len((const char *)s);
    *len = n > 0 ? n : 1;
    if (n == 0)
        return 0xdc00 + s[0];
    if (n == 1)
        return s[0];
    uint32_t cp = s[0] & (0x7f >> n);
    for (int k = 1; k < n; k++)
        cp = cp << 6 | (s[k] & 0x3f);
    return cp;
}

/* Python's order of two names (sorted(), as torchvision sorts classes and
 * files): by code point, an undecodable byte as its surrogate, which sorts
 * after U+D7FF and before U+E000; for UTF-8 names it is byte order. */
static int name_cmp(const char *a, const char *b)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    while (*x != '\0' || *y != '\0') {
        int lx = 0, ly = 0;
        uint32_t cx = *x ? name_char(x, &lx) : 0, cy = *y ? name_char(y, &ly) : 0;
        if (cx != cy)
            return cx < cy ? -1 : 1;
        x += lx;
        y += ly;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return name_cmp(*(char *const *)a, *(char *const *)b);
}

/* The names in a directory (sorted), with whether each is a directory. */
typedef struct {
    char **names;
    bool *is_dir;
    int n;
} dir_list;

static void dir_list_free(dir_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    free(l->is_dir);
    memset(l, 0, sizeof(*l));
}

static int list_dir(const char *path, dir_list *l, tt_err *err)
{
    memset(l, 0, sizeof(*l));
    DIR *d = opendir(path);
    if (d == NULL)
        return err_set(err, TT_ERR_USAGE, "%s: cannot open the directory: %s", path,
                       strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (l->n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(l->names, (size_t)cap * sizeof(char *));
            if (nn == NULL)
                break;
            l->names = nn;
        }
        if ((l->names[l->n] = strdup(e->d_name)) == NULL)
            break;
        l->n++;
    }
    bool oom = e != NULL;
    closedir(d);
    if (oom)
        return err_set(err, TT_ERR_RUNTIME, "out of memory listing %s", path);
    if (l->n > 1)
        qsort(l->names, (size_t)l->n, sizeof(char *), cmp_str);
    if ((l->is_dir = calloc((size_t)l->n + 1, sizeof(bool))) == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory listing %s", path);
    for (int i = 0; i < l->n; i++) {
        char p[8192];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", path, l->names[i]);
        /* stat, not lstat: links are followed, as os.walk(followlinks=True) */
        l->is_dir[i] = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    }
    return 0;
}

typedef struct {
    size_t others;  /* files of image types this reader does not take */
} walk_stats;

/* Adds class `label`'s images under root/rel (rel: "cat", "cat/sub"). Files
 * first, then sub-directories: with the class's entries sorted afterwards by
 * (directory, name) that is sorted(os.walk()) order. */
static int walk(struct image_folder *f, const char *rel, int label, int depth, walk_stats *ws,
                tt_err *err)
{
    char path[8192];
    if (snprintf(path, sizeof(path), "%s/%s", f->root, rel) >= (int)sizeof(path))
        return err_set(err, TT_ERR_USAGE, "%s/%.200s...: path too long", f->root, rel);
    if (depth > MAX_DEPTH)
        return err_set(err, TT_ERR_USAGE, "%s: directories nested more than %d deep (a link "
                       "loop?)", path, MAX_DEPTH);
    dir_list l;
    if (list_dir(path, &l, err) != 0) {
        dir_list_free(&l);
        return -1;
    }
    size_t dir = add_name(f, rel);
    int rc = dir == (size_t)-1 ? err_set(err, TT_ERR_RUNTIME, "out of memory") : 0;
    for (int i = 0; rc == 0 && i < l.n; i++) {
        if (l.is_dir[i]) {
            char sub[4096];
            if (snprintf(sub, sizeof(sub), "%s/%s", rel, l.names[i]) >= (int)sizeof(sub))
                rc = err_set(err, TT_ERR_USAGE, "%s/%.200s...: path too long", f->root, rel);
            else
                rc = walk(f, sub, label, depth + 1, ws, err);
            continue;
        }
        if (!has_image_extension(l.names[i])) {
            ws->others += has_other_image_extension(l.names[i]);
            continue;
        }
        if (f->n == f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 1024;
            folder_entry *p = realloc(f->entries, cap * sizeof(folder_entry));
            if (p == NULL) {
                rc = err_set(err, TT_ERR_RUNTIME, "out of memory");
                break;
            }
            f->entries = p;
            f->cap = cap;
        }
        size_t name = add_name(f, l.names[i]);
        if (name == (size_t)-1) {
            rc = err_set(err, TT_ERR_RUNTIME, "out of memory");
            break;
        }
        f->entries[f->n++] = (folder_entry){.dir = dir, .name = name, .label = label};
    }
    dir_list_free(&l);
    return rc;
}

static const char *sort_names; /* qsort has no context argument */

static int cmp_entry(const void *a, const void *b)
{
    const folder_entry *x = a, *y = b;
    int c = name_cmp(sort_names + x->dir, sort_names + y->dir);
    return c != 0 ? c : name_cmp(sort_names + x->name, sort_names + y->name);
}

/* Reads a file (all of it, or its first `most` bytes) into the scratch. */
static int read_file(const char *path, size_t most, dataset_scratch *s, size_t *len,
                     size_t *file_size, char *why, size_t why_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_len, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, why_len, "not a regular file");
        return -1;
    }
    size_t want = (size_t)st.st_size < most ? (size_t)st.st_size : most;
    if (s->bytes_cap < want + 1) {
        uint8_t *p = realloc(s->bytes, want + 1);
        if (p == NULL) {
            close(fd);
            snprintf(why, why_len, "out of memory for %zu bytes", want);
            return -1;
        }
        s->bytes = p;
        s->bytes_cap = want + 1;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, s->bytes + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            close(fd);
            snprintf(why, why_len, "read error: %s", r < 0 ? strerror(errno) : "file shrank");
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    *file_size = (size_t)st.st_size;
    return 0;
}

/* Reads image i's header into its entry; -1 with why when it does not. */
static int probe(struct image_folder *f, size_t i, dataset_scratch *s, char *why, size_t why_len)
{
    char path[8400];
    folder_entry *e = &f->entries[i];
    snprintf(path, sizeof(path), "%s/%s/%s", f->root, f->names + e->dir, f->names + e->name);
    size_t len, size;
    if (read_file(path, PROBE_BYTES, s, &len, &size, why, why_len) != 0)
        return -1;
    int w = 0, h = 0;
    int rc = image_probe(s->bytes, len, &s->jpeg, &w, &h, why, why_len);
    if (rc == 1 && size > len) { /* a header longer than the first bytes (large EXIF) */
        if (read_file(path, SIZE_MAX, s, &len, &size, why, why_len) != 0)
            return -1;
        rc = image_probe(s->bytes, len, &s->jpeg, &w, &h, why, why_len);
    }
    if (rc == 1 && len == 0)
        snprintf(why, why_len, "empty file");
    else if (rc == 1 && (len < 8 || why[0] == '\0'))
        snprintf(why, why_len, "truncated image header");
    if (rc != 0)
        return rc == IMAGE_NOT_BUILT ? IMAGE_NOT_BUILT : -1;
    e->w = w;
    e->h = h;
    return 0;
}

/* The class folders of root, in sorted order, each walked for its images;
 * the names of up to 3 without any into empty (n_empty counts them all). */
static int read_classes(struct image_folder *f, walk_stats *ws, char *empty, size_t empty_len,
                        int *n_empty, tt_err *err)
{
    dir_list classes;
    if (list_dir(f->root, &classes, err) != 0) {
        dir_list_free(&classes);
        return -1;
    }
    int rc = 0;
    if ((f->class_name = calloc((size_t)classes.n + 1, sizeof(size_t))) == NULL)
        rc = err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int i = 0; rc == 0 && i < classes.n; i++) {
        if (!classes.is_dir[i])
            continue; /* files in root itself are not images of a class */
        size_t first = f->n;
        f->class_name[f->n_classes] = add_name(f, classes.names[i]);
        rc = walk(f, classes.names[i], f->n_classes, 0, ws, err);
        if (rc == 0 && f->n == first && (*n_empty)++ < 3)
            snprintf(empty + strlen(empty), empty_len - strlen(empty), "%s'%s'",
                     *n_empty > 1 ? ", " : "", classes.names[i]);
        sort_names = f->names; /* stable: f->names does not move during the sort */
        if (f->n - first > 1)
            qsort(f->entries + first, f->n - first, sizeof(folder_entry), cmp_entry);
        f->n_classes++;
    }
    dir_list_free(&classes);
    if (rc != 0)
        return -1;
    if (f->n_classes == 0)
        return err_set(err, TT_ERR_USAGE, "%s: no class folders (image_folder wants "
                       "root/<class>/<image>.jpg|.jpeg|.png)", f->root);
    if (f->n == 0)
        return err_set(err, TT_ERR_USAGE, "%s: no .jpg, .jpeg or .png files in its %d class "
                       "folder(s)", f->root, f->n_classes);
    return 0;
}

/* Every header, once; corrupt ones leave the list (skip_corrupt, counted in
 * *skipped, the first named in first_bad) or stop the open. */
static int probe_all(struct image_folder *f, int limit, size_t *skipped, char *first_bad,
                     size_t first_bad_len, tt_err *err)
{
    dataset_scratch s = {0};
    size_t kept = 0, want = limit > 0 ? (size_t)limit : f->n;
    int rc = 0;
    for (size_t i = 0; i < f->n && kept < want && rc == 0; i++) {
        char why[300] = "";
        int rc_probe = probe(f, i, &s, why, sizeof(why));
        if (rc_probe == 0) {
            f->entries[kept++] = f->entries[i];
            continue;
        }
        char path[4400];
        folder_entry bad = f->entries[i];
        snprintf(path, sizeof(path), "%s/%s/%s", f->root, f->names + bad.dir, f->names + bad.name);
        if (rc_probe == IMAGE_NOT_BUILT) /* the build's lack, not the file's fault */
            rc = err_set(err, TT_ERR_USAGE, "%s: %s", path, why);
        else if (!f->skip_corrupt)
            rc = err_set(err, TT_ERR_USAGE, "%s: %s (skip_corrupt = true skips files that do "
                         "not decode)", path, why);
        else if ((*skipped)++ == 0)
            snprintf(first_bad, first_bad_len, "%.700s: %s", path, why);
    }
    dataset_scratch_free(&s);
    if (rc != 0)
        return -1;
    f->n = kept;
    if (f->n == 0)
        return err_set(err, TT_ERR_USAGE, "%s: none of its images decodes (the first: %s)",
                       f->root, first_bad);
    return 0;
}

int image_folder_open(const source_cfg *src, int limit, struct dataset *ds, tt_err *err)
{
    struct image_folder *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    ds->folder = f;
    pthread_mutex_init(&f->lock, NULL);
    snprintf(f->root, sizeof(f->root), "%s", src->root);
    f->channels = src->channels == 1 ? 1 : 3;
    f->skip_corrupt = src->skip_corrupt;

    walk_stats ws = {0};
    char empty[256] = "", first_bad[1024] = "";
    int n_empty = 0;
    size_t skipped = 0;
    if (read_classes(f, &ws, empty, sizeof(empty), &n_empty, err) != 0)
        return -1;
    size_t listed = f->n;
    if (probe_all(f, limit, &skipped, first_bad, sizeof(first_bad), err) != 0)
        return -1;
    if ((f->reported = calloc(f->n, 1)) == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");

    ds->n = f->n;
    ds->uniform = true;
    size_t most = 0;
    for (size_t i = 0; i < f->n; i++) {
        size_t px = (size_t)f->entries[i].w * (size_t)f->entries[i].h;
        most = px > most ? px : most;
        ds->uniform &= f->entries[i].w == f->entries[0].w && f->entries[i].h == f->entries[0].h;
    }
    ds->shape = shape3_make(f->channels, f->entries[0].h, f->entries[0].w);
    ds->max_floats = most * (size_t)f->channels;
    if ((ds->labels = malloc(f->n * sizeof(int32_t))) == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < f->n; i++)
        ds->labels[i] = f->entries[i].label;

    /* names as err_set writes them: a newline or a terminal's control byte in
     * a file name must not split or garble the log's line */
    char root[LOG_NAME_BYTES], names[LOG_NAME_BYTES];
    str_escape(f->root, root, sizeof(root));
    char of[64] = "";
    if (f->n + skipped < listed) /* the limit stopped the probe */
        snprintf(of, sizeof(of), " (dataflow.limit: the first of %zu files)", listed);
    log_printf("image_folder %s: %zu images%s in %d classes%s\n", root, f->n, of, f->n_classes,
               ds->uniform ? "" : " (of different sizes)");
    if (n_empty > 0) {
        str_escape(empty, names, sizeof(names));
        log_printf("image_folder %s: %d class folder(s) without images keep their class "
                   "index: %s%s\n", root, n_empty, names, n_empty > 3 ? ", ..." : "");
    }
    if (skipped > 0) {
        str_escape(first_bad, names, sizeof(names));
        log_printf("image_folder %s: skipped %zu file(s) that do not decode (skip_corrupt); "
                   "the first: %s\n", root, skipped, names);
    }
    if (ws.others > 0)
        log_printf("image_folder %s: %zu .bmp/.ppm/.pgm/.tif/.tiff/.webp file(s) are not read "
                   "(JPEG and PNG are)\n", root, ws.others);
    return 0;
}

/* The decoding scratch of a prefetch worker (dataflow.h): the image folder's
 * file bytes, pixels and JPEG decoder. */
void dataset_scratch_free(dataset_scratch *s)
{
    free(s->bytes);
    free(s->pix);
    image_decoder_free(s->jpeg);
    memset(s, 0, sizeof(*s));
}

const char *image_folder_class(const struct dataset *ds, int k)
{
    const struct image_folder *f = ds->folder;
    if (k < 0 || k >= f->n_classes || f->class_name[k] == (size_t)-1)
        return NULL;
    return f->names + f->class_name[k];
}

shape3 image_folder_shape(const struct dataset *ds, size_t i)
{
    const folder_entry *e = &ds->folder->entries[i];
    return shape3_make(ds->folder->channels, e->h, e->w);
}

/* Decodes image i into x as C x H x W floats in [0, 1]. */
static int decode_one(const struct dataset *ds, size_t i, float *x, shape3 *shape,
                      dataset_scratch *s, char *why, size_t why_len)
{
    struct image_folder *f = ds->folder;
    const folder_entry *e = &f->entries[i];
    char path[8400];
    snprintf(path, sizeof(path), "%s/%s/%s", f->root, f->names + e->dir, f->names + e->name);
    size_t len, size;
    int w, h;
    if (read_file(path, SIZE_MAX, s, &len, &size, why, why_len) != 0 ||
        image_decode(s->bytes, len, f->channels, &s->jpeg, &s->pix, &s->pix_cap, &w, &h, why,
                     why_len) != 0)
        return -1;
    if (w != e->w || h != e->h) {
        snprintf(why, why_len, "is %dx%d now but was %dx%d when the folder was opened", w, h,
                 e->w, e->h);
        return -1;
    }
    int c = f->channels;
    size_t plane = (size_t)w * h;
    for (int k = 0; k < c; k++) {
        const uint8_t *p = s->pix + k;
        float *o = x + (size_t)k * plane;
        for (size_t j = 0; j < plane; j++)
            o[j] = dataset_byte_value(p[j * c]);
    }
    *shape = shape3_make(c, h, w);
    return 0;
}

int image_folder_sample(const struct dataset *ds, size_t i, float *x, shape3 *shape,
                        dataset_scratch *s, tt_err *err)
{
    struct image_folder *f = ds->folder;
    for (size_t k = 0; k < ds->n; k++) {
        size_t j = (i + k) % ds->n;
        char why[300] = "";
        if (decode_one(ds, j, x, shape, s, why, sizeof(why)) == 0)
            return f->entries[j].label;
        char path[4400];
        image_folder_path(ds, j, path, sizeof(path));
        if (!f->skip_corrupt)
            return err_set(err, TT_ERR_USAGE, "%s: %s (skip_corrupt = true skips files that "
                           "do not decode)", path, why);
        pthread_mutex_lock(&f->lock);
        bool first = !f->reported[j];
        f->reported[j] = 1;
        pthread_mutex_unlock(&f->lock);
        if (first) {
            char e_path[LOG_NAME_BYTES], e_why[LOG_NAME_BYTES];
            str_escape(path, e_path, sizeof(e_path));
            str_escape(why, e_why, sizeof(e_why));
            log_printf("image_folder: skipping %s: %s (the next image stands in for it)\n",
                       e_path, e_why);
        }
    }
    return err_set(err, TT_ERR_USAGE, "%s: none of its images decodes", f->root);
}

void image_folder_close(struct image_folder *f)
{
    if (f == NULL)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f->entries);
    free(f->names);
    free(f->class_name);
    free(f->reported);
    free(f);
}
