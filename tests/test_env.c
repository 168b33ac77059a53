/* test_env.c - the environment switches' rule (util/env.h): unset and
 * empty are the default, each word its index, anything else ENV_OTHER
 * (case, spaces and prefixes included). */
#include <stdlib.h>

#include "tt_test.h"
#include "util/env.h"

static void check(const char *value, int want)
{
    static const char *const words[] = {"0", "1", "each_call"};
    if (value == NULL)
        unsetenv("TT_TEST_SWITCH");
    else
        setenv("TT_TEST_SWITCH", value, 1);
    int got = env_word("TT_TEST_SWITCH", words, 3);
    tt_ok(got == want, "TT_TEST_SWITCH=%s: %d (got %d)", value ? value : "(unset)", want, got);
}

/* env_bit: the words "0" and "1" */
static void check_bit(const char *value, int want)
{
    setenv("TT_TEST_SWITCH", value, 1);
    int got = env_bit("TT_TEST_SWITCH");
    tt_ok(got == want, "env_bit TT_TEST_SWITCH=%s: %d (got %d)", value, want, got);
}

int main(void)
{
    check(NULL, ENV_UNSET);
    check("", ENV_UNSET);
    check("0", 0);
    check("1", 1);
    check("each_call", 2);
    check("each", ENV_OTHER);
    check("each_call ", ENV_OTHER);
    check("EACH_CALL", ENV_OTHER);
    check("10", ENV_OTHER);
    check(" 1", ENV_OTHER);
    check_bit("", ENV_UNSET);
    check_bit("0", 0);
    check_bit("1", 1);
    check_bit("yes", ENV_OTHER);
    return tt_done();
}
