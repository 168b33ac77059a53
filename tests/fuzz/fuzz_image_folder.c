/* fuzz_image_folder.c - the image folder source: its file list, each image's
 * header at open (image_probe), and the pixels at read (image_decode, PNG
 * through libpng and JPEG through TurboJPEG). Input: one flags byte (bit 0:
 * channels = 1, else 3; bit 1: skip_corrupt; bit 2: the first file is named
 * .jpg, else .png; bit 3: the same for the second; bit 4: a second file;
 * bit 5: dataflow.limit = 1, so the second is listed but never read),
 * with a second file three bytes (little-endian) for the first's length,
 * then the first file and the second (the rest). The files are
 * root/a/0.<ext> (class 0) and root/b/1.<ext> (class 1). Every sample of an
 * opened dataset is read back. */
#include "tests/fuzz/fuzz_common.h"

#include <errno.h>
#include <sys/stat.h>

#include "dataflow/dataflow.h"

/* more floats than this a sample: not read (the decoder would allocate as
 * much for pixels, and libFuzzer counts that against its memory limit) */
#define MOST_FLOATS (1u << 22)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int flags = data[0];
    bool two = flags & 16;
    data++;
    size--;
    size_t first = size;
    if (two) {
        if (size < 3)
            return 0;
        first = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16;
        data += 3;
        size -= 3;
        if (first > size)
            first = size;
    }
    source_cfg src = { .type = SOURCE_IMAGE_FOLDER, .channels = flags & 1 ? 1 : 3,
                       .skip_corrupt = flags & 2 };
    snprintf(src.root, sizeof(src.root), "%s/root", fuzz_dir());
    /* a fresh folder each time: the last input's files are gone */
    static const char *const names[4] = { "a/0.png", "a/0.jpg", "b/1.png", "b/1.jpg" };
    char path[4200];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", src.root, names[i]);
        unlink(path);
    }
    static const char *const dirs[3] = { "", "/a", "/b" };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s%s", src.root, dirs[i]);
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            abort();
    }
    fuzz_write(flags & 4 ? "root/a/0.jpg" : "root/a/0.png", data, first);
    if (two)
        fuzz_write(flags & 8 ? "root/b/1.jpg" : "root/b/1.png", data + first, size - first);
    dataset_t *ds = NULL;
    tt_err err = { 0 };
    int limit = flags & 32 ? 1 : 0;
    int rc = dataset_open(&src, limit, 2, &ds, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    size_t n = dataset_size(ds), files = two && !limit ? 2u : 1u;
    if (n < 1 || n > files || (!src.skip_corrupt && n != files))
        abort(); /* without skip_corrupt, a file whose header does not read fails the open */
    if (dataset_max_floats(ds) > MOST_FLOATS) {
        dataset_free(ds);
        return 0;
    }
    float *x = malloc(dataset_max_floats(ds) * sizeof(float));
    dataset_scratch scratch = { 0 };
    for (size_t i = 0; x != NULL && i < n; i++) {
        shape3 s = { 0 };
        tt_err rerr = { 0 };
        int y = dataset_read(ds, i, x, &s, &scratch, &rerr);
        if (y < 0) {
            fuzz_check_error(&rerr, -1); /* a file that does not decode: one clean line */
            continue;
        }
        if (y > 1 || s.c != src.channels || shape3_size(s) > dataset_max_floats(ds))
            abort();
        /* without skip_corrupt no other image stands in: sample i is file i */
        shape3 own = dataset_sample_shape(ds, i);
        if (!src.skip_corrupt && (s.h != own.h || s.w != own.w || y != (int)i))
            abort();
        fuzz_check_pixels(x, shape3_size(s));
    }
    dataset_scratch_free(&scratch);
    free(x);
    dataset_free(ds);
    return 0;
}
