/* tt_stdump.c - test helper (not a test): what towertrain's own safetensors
 * reader (src/checkpoint/safetensors.c) sees in a file, for
 * tests/e2e_safetensors.sh to set beside the reference safetensors library.
 *
 *   tt_stdump FILE DATA.bin [KEY...]
 *
 * Reads FILE with safetensors_read. Refused: its error line on stderr, exit
 * status 2. Read: one line per tensor in header order, "tensor NAME DTYPE
 * NDIM D0 D1 ... BYTES", each tensor's bytes appended to DATA.bin in that
 * order, then "meta KEY VALUE" for each KEY asked for that the file holds
 * (the reader has no list of keys; the caller asks for those the reference
 * library reports), exit status 0. */
#include <stdio.h>
#include <string.h>

#include "checkpoint/safetensors.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tt_stdump FILE DATA.bin [KEY...]\n");
        return 1;
    }
    safetensors_file *f = NULL;
    tt_err err = {0};
    if (safetensors_read(argv[1], &f, &err) != 0) {
        fprintf(stderr, "tt_stdump: %s\n", err.msg);
        return 2;
    }
    FILE *out = fopen(argv[2], "wb");
    if (out == NULL) {
        perror(argv[2]);
        safetensors_free(f);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < safetensors_count(f); i++) {
        const st_tensor *t = safetensors_tensor(f, i);
        printf("tensor %s %s %d", t->name, t->dtype, t->ndim);
        for (int d = 0; d < t->ndim; d++)
            printf(" %lld", (long long)t->shape[d]);
        printf(" %zu\n", t->bytes);
        if (t->bytes > 0 && fwrite(t->data, 1, t->bytes, out) != t->bytes)
            rc = 1;
    }
    for (int i = 3; i < argc; i++) {
        const char *v = safetensors_meta(f, argv[i]);
        /* values are one line except the job's text: escape newlines */
        if (v != NULL) {
            printf("meta %s ", argv[i]);
            for (; *v; v++) {
                if (*v == '\n')
                    fputs("\\n", stdout);
                else if (*v == '\\')
                    fputs("\\\\", stdout);
                else
                    putchar(*v);
            }
            putchar('\n');
        }
    }
    if (fclose(out) != 0)
        rc = 1;
    safetensors_free(f);
    return rc;
}
