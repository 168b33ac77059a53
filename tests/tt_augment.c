/* tt_augment.c - test helper (not a test): runs one augmentation of
 * src/dataflow/augment.c on a sample read from stdin, so a test can compare
 * it with torchvision's functional transforms.
 *
 *   tt_augment resize S                  < sample > sample
 *   tt_augment center_crop S             < sample > sample
 *   tt_augment resample OH OW            < sample > sample
 *   tt_augment rrc S S0 S1 R0 R1 SEED    < sample > sample   (params on stderr)
 *   tt_augment jitter B C S SEED         < sample > sample   (params on stderr)
 *   tt_augment rrc_params H W S0 S1 R0 R1 SEED N    (N lines: top left h w)
 *   tt_augment jitter_params B C S SEED N           (N lines: o0 o1 o2 f0 f1 f2)
 *
 * A sample is int32 C, H, W then C*H*W float32, native byte order. The
 * random ops draw from rng_make(SEED, 0, 0), as one sample's stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/augment.h"

static float *read_sample(shape3 *s)
{
    int32_t h[3];
    if (fread(h, sizeof(h), 1, stdin) != 1)
        return NULL;
    *s = shape3_make(h[0], h[1], h[2]);
    float *x = malloc(shape3_size(*s) * sizeof(float));
    if (x && fread(x, sizeof(float), shape3_size(*s), stdin) != shape3_size(*s)) {
        free(x);
        return NULL;
    }
    return x;
}

static void write_sample(const float *x, shape3 s)
{
    int32_t h[3] = {s.c, s.h, s.w};
    fwrite(h, sizeof(h), 1, stdout);
    fwrite(x, sizeof(float), shape3_size(s), stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *op = argv[1];
    augment_cfg a;
    memset(&a, 0, sizeof(a));
    if (strcmp(op, "rrc_params") == 0 && argc == 10) {
        double scale[2] = {atof(argv[4]), atof(argv[5])}, ratio[2] = {atof(argv[6]), atof(argv[7])};
        for (int k = 0; k < atoi(argv[9]); k++) {
            rng_t rng = rng_make((uint64_t)atoll(argv[8]) + (uint64_t)k, 0, 0);
            int t, l, h, w;
            augment_rrc_params(&rng, atoi(argv[2]), atoi(argv[3]), scale, ratio, &t, &l, &h, &w);
            printf("%d %d %d %d\n", t, l, h, w);
        }
        return 0;
    }
    if (strcmp(op, "jitter_params") == 0 && argc == 7) {
        a.brightness = (float)atof(argv[2]);
        a.contrast = (float)atof(argv[3]);
        a.saturation = (float)atof(argv[4]);
        for (int k = 0; k < atoi(argv[6]); k++) {
            rng_t rng = rng_make((uint64_t)atoll(argv[5]) + (uint64_t)k, 0, 0);
            int o[3];
            double f[3];
            augment_color_jitter_params(&rng, &a, o, f);
            printf("%d %d %d %.17g %.17g %.17g\n", o[0], o[1], o[2], f[0], f[1], f[2]);
        }
        return 0;
    }
    shape3 s;
    float *x = read_sample(&s);
    if (x == NULL)
        return 2;
    shape3 out;
    rng_t rng = {0};
    if (strcmp(op, "resize") == 0 && argc == 3) {
        a.type = AUG_RESIZE;
        a.size = atoi(argv[2]);
    } else if (strcmp(op, "center_crop") == 0 && argc == 3) {
        a.type = AUG_CENTER_CROP;
        a.size = atoi(argv[2]);
    } else if (strcmp(op, "resample") == 0 && argc == 4) {
        int oh = atoi(argv[2]), ow = atoi(argv[3]);
        size_t most = shape3_size(s);
        size_t need[2] = {(size_t)s.c * s.h * ow, (size_t)s.c * oh * ow};
        for (int k = 0; k < 2; k++)
            most = need[k] > most ? need[k] : most;
        float *big = malloc(most * sizeof(float)), *tmp = malloc(most * sizeof(float));
        memcpy(big, x, shape3_size(s) * sizeof(float));
        augment_resample(big, s, oh, ow, tmp);
        write_sample(big, shape3_make(s.c, oh, ow));
        return 0;
    } else if (strcmp(op, "rrc") == 0 && argc == 8) {
        a.type = AUG_RANDOM_RESIZED_CROP;
        a.size = atoi(argv[2]);
        a.scale[0] = atof(argv[3]);
        a.scale[1] = atof(argv[4]);
        a.ratio[0] = atof(argv[5]);
        a.ratio[1] = atof(argv[6]);
        rng = rng_make((uint64_t)atoll(argv[7]), 0, 0);
        rng_t copy = rng;
        int t, l, h, w;
        augment_rrc_params(&copy, s.h, s.w, a.scale, a.ratio, &t, &l, &h, &w);
        fprintf(stderr, "%d %d %d %d\n", t, l, h, w);
    } else if (strcmp(op, "jitter") == 0 && argc == 6) {
        a.type = AUG_COLOR_JITTER;
        a.brightness = (float)atof(argv[2]);
        a.contrast = (float)atof(argv[3]);
        a.saturation = (float)atof(argv[4]);
        rng = rng_make((uint64_t)atoll(argv[5]), 0, 0);
        rng_t copy = rng;
        int o[3];
        double f[3];
        augment_color_jitter_params(&copy, &a, o, f);
        fprintf(stderr, "%d %d %d %.17g %.17g %.17g\n", o[0], o[1], o[2], f[0], f[1], f[2]);
    } else {
        fprintf(stderr, "tt_augment: bad arguments\n");
        return 2;
    }
    tt_err err = {0};
    if (augment_output_shape(&a, 1, s, &out, &err) != 0) {
        fprintf(stderr, "tt_augment: %s\n", err.msg);
        return 2;
    }
    size_t n = augment_buffer_size(&a, 1, s);
    float *buf = malloc(n * sizeof(float)), *tmp = malloc(n * sizeof(float));
    memcpy(buf, x, shape3_size(s) * sizeof(float));
    augment_apply(&a, 1, &rng, buf, s, tmp);
    write_sample(buf, out);
    free(buf);
    free(tmp);
    free(x);
    return 0;
}
