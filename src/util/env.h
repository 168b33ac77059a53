/* env.h - how towertrain reads its environment switches (TT_CPU_ISA,
 * TT_CUDA_LAYOUT, TT_CUDA_GRAPH, ...; towertrain(1), ENVIRONMENT): one
 * rule for all of them. Unset or empty, the switch's default; one of its
 * words, that; anything else, a usage error that its checker reports
 * (exit status 2) before the switch is used. */
#ifndef TT_ENV_H
#define TT_ENV_H

#define ENV_UNSET (-1) /* unset or empty: the switch's default */
#define ENV_OTHER (-2) /* none of its words: a usage error */

/* The index in words[0..n) of environment variable `name`'s value, or
 * ENV_UNSET or ENV_OTHER. */
int env_word(const char *name, const char *const *words, int n);

/* env_word of an on/off switch, whose words are "0" and "1": 0, 1,
 * ENV_UNSET or ENV_OTHER. */
int env_bit(const char *name);

#endif
