/* replay_main.c - runs a fuzz target over its corpus without libFuzzer, as
 * a TAP test of `make check`: tests/fuzz/replay_<target> reads every file of
 * $TT_SRCDIR/tests/fuzz/corpus/<target> (or the files and directories given
 * as arguments) and passes each to LLVMFuzzerTestOneInput. A crash or an
 * abort is a failed test; so is an empty corpus. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (bigger == NULL)
            free(buf);
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (buf == NULL)
        return -1;
    /* libFuzzer passes a buffer of exactly the input's size: so do we, for ASan */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

/* Replays a file, or every file of a directory in name order; returns the count. */
static int replay(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode))
        return replay_file(path) == 0 ? 1 : -1;
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    char **names = NULL;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, (size_t)cap * sizeof(*names));
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(*names), by_name);
    int done = 0;
    for (int i = 0; i < n; i++) {
        if (replay_file(names[i]) == 0)
            done++;
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    const char *self = strrchr(argv[0], '/');
    self = self ? self + 1 : argv[0];
    const char *target = strncmp(self, "replay_", 7) == 0 ? self + 7 : self;
    char corpus[4096];
    const char *src = getenv("TT_SRCDIR");
    snprintf(corpus, sizeof(corpus), "%s/tests/fuzz/corpus/%s", src ? src : ".", target);
    int total = 0;
    if (argc < 2) {
        total = replay(corpus);
    } else {
        for (int i = 1; i < argc && total >= 0; i++) {
            int k = replay(argv[i]);
            total = k < 0 ? -1 : total + k;
        }
    }
    if (total > 0)
        printf("ok 1 - %s: %d inputs replayed without a crash\n", target, total);
    else
        printf("not ok 1 - %s: no inputs in %s\n", target, argc < 2 ? corpus : argv[1]);
    printf("1..1\n");
    return total > 0 ? 0 : 1;
}
