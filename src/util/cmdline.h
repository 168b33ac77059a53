/* cmdline.h - one option of a command line as main.c's option table read it:
 * its name ("--towers", "-e") and its value (NULL for a flag). Commands with
 * options of their own (bench) take these instead of argv, so every command
 * reads its words by the same rules (towertrain(1), OPTIONS). */
#ifndef TT_CMDLINE_H
#define TT_CMDLINE_H

typedef struct {
    const char *name;
    const char *value;
} cmdline_opt;

#endif
