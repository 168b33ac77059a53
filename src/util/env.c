/* env.c - the environment switches' one rule (env.h). */
#include "util/env.h"

#include <stdlib.h>
#include <string.h>

int env_word(const char *name, const char *const *words, int n)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return ENV_UNSET;
    for (int i = 0; i < n; i++)
        if (strcmp(v, words[i]) == 0)
            return i;
    return ENV_OTHER;
}

int env_bit(const char *name)
{
    static const char *const off_on[] = {"0", "1"};
    return env_word(name, off_on, 2);
}
