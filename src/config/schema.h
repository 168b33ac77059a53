/* schema.h - the declarative description of job and model files (private to
 * src/config).
 *
 * ONE table per group of keys (name, kind, default, range, allowed values,
 * required, doc) drives validation, default filling, the did-you-mean
 * suggestions and the man page. Groups whose keys depend on a `type` key
 * (source, augment, optimizer, trainer, layer, callback, monitor) list their
 * per-type keys as variants.
 *
 * Key paths in messages: groups are joined with '.', list and array elements
 * are written [i] (from 0): "trainer.nr_tower", "callbacks[1].schedule",
 * "model.layers[2].kernel"; in a model file "layers[2].kernel".
 */
#ifndef TT_CONFIG_SCHEMA_H
#define TT_CONFIG_SCHEMA_H

#include <libconfig.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

typedef enum {
    KEY_INT,          /* integer stored as an int: hi defaults to INT32_MAX */
    KEY_INT64,        /* integer, 64-bit allowed (1L): hi defaults to 2^53 */
    KEY_FLOAT,        /* number stored as a float; an integer is accepted
                         (learning_rate = 1); finite and within +-FLT_MAX */
    KEY_BOOL,
    KEY_STRING,       /* with `allowed`: one of those values */
    KEY_PATH,         /* string, a file path; made absolute */
    KEY_GROUP,        /* { ... } described by `sub` */
    KEY_GROUP_LIST,   /* ( {..}, {..} ), each element described by `sub` */
    KEY_PLUGIN_LIST,  /* like KEY_GROUP_LIST, and "name" is short for { type = "name"; } */
    KEY_INT_ARRAY,    /* [1, 2]; the range applies to each element */
    KEY_FLOAT_ARRAY,
    KEY_STRING_ARRAY,
    KEY_PATH_ARRAY,
    KEY_CUSTOM,       /* any value: the key's `parse` checks it */
    KEY_SCHEDULE      /* ( (epoch, value), ... ), epochs >= 0 and not decreasing */
} key_kind;

typedef enum { BOUND_NONE, BOUND_INCL, BOUND_EXCL } bound_kind;

struct group_spec;
typedef struct vctx vctx;

typedef struct {
    const char *name;
    key_kind kind;
    const char *def;       /* default in libconfig syntax; NULL: none */
    bool required;
    bound_kind lo_kind, hi_kind;
    double lo, hi;
    const char *const *allowed; /* NULL-terminated */
    const struct group_spec *sub;
    int min_len, max_len;  /* arrays and lists: element count (max 0: no limit) */
    bool ascending;        /* number arrays: no element below the one before it */
    /* KEY_CUSTOM: checks (and may resolve) the value; a table's hook into the
     * module that owns the key's meaning, so the engine knows no key. */
    int (*parse)(vctx *c, config_setting_t *s, const char *key);
    const char *doc;
    /* KEY_PATH(_ARRAY): what to do when the file is not there (vctx.missing) */
    const char *missing_hint;
} key_spec;

typedef struct {
    const char *name;      /* the value of `type` */
    const key_spec *keys;  /* ends with a key whose name is NULL */
    int k_steps;           /* plug-ins: default every_k_steps (0: every epoch) */
    const char *doc;
} variant_spec;

typedef struct group_spec {
    const char *what;              /* "optimizer", "layer", ... for messages */
    const key_spec *keys;          /* keys of every group; NULL-name terminated */
    const variant_spec *variants;  /* NULL-name terminated, or NULL */
    const char *default_type;      /* NULL: `type` is required (with variants) */
    /* A group of the same form listed elsewhere (callbacks and monitors), for
     * "'json' is a monitor: list it in monitors". */
    const struct group_spec *sibling;
    const char *sibling_list;
    /* Cross-key rules, run after the keys are checked and defaults filled. */
    int (*check)(vctx *c, config_setting_t *g, const char *path, const variant_spec *v);
} group_spec;

/* The state of one validation: where messages point and how paths resolve. */
struct vctx {
    const char *file;        /* the file as the user named it, for messages */
    const char *real_path;   /* what was opened (to tell @include'd files apart) */
    const char *base;        /* relative paths resolve against this file's dir */
    const char *const *sets; /* the --set arguments, "KEY=VALUE" */
    int n_sets;
    config_t *cfg;
    tt_err *err;
    struct model_cfg *model; /* job: where the `model` key's parse builds it */
    /* job: the first path key whose file is not there, as a message naming
     * the file, line and key ("" when every one is); NULL: not asked */
    char *missing;
    size_t missing_len;
};

/* The hook of a key a --set kept from the file in a group whose `type` it
 * changed (job.c's merge_group): a key of the old type only is dropped
 * instead of refused (optimizer={type="adam";} on a momentum optimizer
 * drops its momentum). Not a --set number (those are > 0). */
#define SCHEMA_HOOK_OTHER_TYPE ((void *)(intptr_t)-1)

/* Validates group g (path "" for the root) against spec: unknown keys, types,
 * ranges, allowed values, required keys; fills defaults into the tree. */
int schema_check_group(vctx *c, config_setting_t *g, const group_spec *spec,
                       const char *path);

/* Fills err with "LOCATION: [KEY: ]MESSAGE" where LOCATION is "FILE:LINE" of s,
 * or "--set ARG" when s came from a --set (then KEY is left out when s is the
 * set node itself). key may be NULL. Returns -1. */
int schema_error(vctx *c, const config_setting_t *s, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Adds (or replaces) `name` in group parent by parsing value (libconfig syntax).
 * Returns the new setting or NULL when value does not parse. */
config_setting_t *schema_add_value(config_setting_t *parent, const char *name,
                                   const char *value);

/* Deep copy of src as a new child of parent (name NULL for list elements). */
config_setting_t *schema_copy(config_setting_t *parent, const char *name,
                              const config_setting_t *src);

/* Resolves a path string relative to the file (or to the cwd when it came from
 * a --set) and stores it back. */
int schema_resolve_path(vctx *c, config_setting_t *s, int elem, const char *key);

/* The --set that produced s (or an ancestor), as index + 1, 0 when none. */
int schema_set_of(const config_setting_t *s);

/* Number of any libconfig number setting. */
double schema_number(const config_setting_t *s);

/* Writes a setting tree in libconfig syntax (cfg_write.c). */
int cfg_write_root(const config_setting_t *root, FILE *out);

/* A path for messages: relative to the cwd when below it, else absolute. */
void schema_display_path(const char *abs, char *out, size_t n);

/* Reads a libconfig file: errors "FILE:LINE: syntax error..." or
 * "cannot read FILE: strerror". display names the file in messages. */
int schema_read_file(config_t *cfg, const char *path, const char *display, tt_err *err);

#endif
