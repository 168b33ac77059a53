/* test_strutil.c - did-you-mean, path resolution, tag cleaning and the escaping
 * of bytes from users' files in messages. */
#include <string.h>

#include "tt_test.h"
#include "util/strutil.h"

static void clean(const char *in, const char *want)
{
    char buf[64];
    strcpy(buf, in);
    str_clean_tag(buf);
    tt_ok(strcmp(buf, want) == 0, "clean tag '%s' -> '%s' (got '%s')", in, want, buf);
}

static void escape(const char *in, size_t n, const char *want)
{
    char out[256];
    size_t len = str_escape(in, out, n);
    tt_ok(strcmp(out, want) == 0 && len == strlen(want), "escape (room %zu) -> '%s' (got '%s')",
          n, want, out);
}

int main(void)
{
    const char *keys[] = {"optimizer", "trainer", "dataflow", "max_epoch"};
    tt_ok(str_edit_distance("kitten", "sitting") == 3, "edit distance kitten/sitting = 3");
    const char *c = str_closest("optimzer", keys, 4);
    tt_ok(c && strcmp(c, "optimizer") == 0, "did you mean 'optimizer' for 'optimzer'");
    tt_ok(str_closest("zzzzzzzz", keys, 4) == NULL, "no suggestion for an unrelated word");

    char out[256];
    tt_ok(path_resolve("/a/b/job.cfg", "../models/x.cfg", out, sizeof(out)) == 0 &&
              strcmp(out, "/a/models/x.cfg") == 0, "relative to the job file's directory: %s", out);
    tt_ok(path_resolve("/a/job.cfg", "/abs//./p/../q", out, sizeof(out)) == 0 &&
              strcmp(out, "/abs/q") == 0, "an absolute path is only normalised: %s", out);
    tt_ok(path_resolve("/job.cfg", "../../x", out, sizeof(out)) == 0 && strcmp(out, "/x") == 0,
          "'..' stops at the root: %s", out);
    tt_ok(path_resolve("/a/job.cfg", "x", out, 4) == -1, "a result that does not fit is refused");
    path_stem("jobs/fashion_mnist_lenet.cfg", out, sizeof(out));
    tt_ok(strcmp(out, "fashion_mnist_lenet") == 0, "stem of a job file: %s", out);

    clean("tower0/cross_entropy_loss:0", "cross_entropy_loss");
    clean("tower12/sub/tower3/acc", "sub/acc");
    clean("towering/x", "towering/x");
    clean("train_loss", "train_loss");
    clean("a:01", "a:01");

    /* printable ASCII and well-formed UTF-8 stay; the rest is \xNN */
    escape("plain path/x.cfg", 256, "plain path/x.cfg");
    escape("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80", 256,
           "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
    escape("a\nb\rc\td", 256, "a\\x0ab\\x0dc\\x09d");
    escape("\x1b[31mred\x1b]0;title\x07", 256, "\\x1b[31mred\\x1b]0;title\\x07");
    escape("del\x7f", 256, "del\\x7f");
    escape("c1 \xc2\x9b csi", 256, "c1 \\xc2\\x9b csi");        /* U+009B: a terminal's CSI */
    escape("nbsp\xc2\xa0", 256, "nbsp\xc2\xa0");                /* U+00A0 is printable */
    escape("\xff\xfe latin1 \xe9t\xe9", 256, "\\xff\\xfe latin1 \\xe9t\\xe9");
    escape("overlong \xc0\xaf \xe0\x80\xaf", 256, "overlong \\xc0\\xaf \\xe0\\x80\\xaf");
    escape("surrogate \xed\xa0\x80", 256, "surrogate \\xed\\xa0\\x80");
    escape("above U+10FFFF \xf4\x90\x80\x80", 256,
           "above U+10FFFF \\xf4\\x90\\x80\\x80");
    escape("cut \xe6\x97", 256, "cut \\xe6\\x97");               /* truncated at the end */
    escape("back\\slash", 256, "back\\slash");                   /* stays: idempotent */
    escape("x\\x1b", 256, "x\\x1b");
    /* nothing cut in half: what does not fit is left out */
    escape("ab\x1b", 5, "ab");
    escape("ab\x1b", 7, "ab\\x1b");
    escape("a\xe6\x97\xa5", 4, "a");
    escape("a\xe6\x97\xa5", 5, "a\xe6\x97\xa5");
    escape("anything", 1, "");
    /* str_utf8_len: the character lengths RFC 3629 allows, 0 for the rest */
    static const struct {
        const char *s;
        int len;
    } chars[] = {{"a", 1}, {"\x7f", 1}, {"", 0}, {"\xc3\xa9", 2}, {"\xc2\x80", 2},
                 {"\xe6\x97\xa5", 3}, {"\xf0\x9f\x98\x80", 4}, {"\xc0\xaf", 0},
                 {"\xe0\x80\xaf", 0}, {"\xed\xa0\x80", 0}, {"\xf4\x90\x80\x80", 0},
                 {"\xe6\x97", 0}, {"\x80", 0}, {"\xff", 0}};
    for (size_t i = 0; i < sizeof(chars) / sizeof(chars[0]); i++)
        tt_ok(str_utf8_len(chars[i].s) == chars[i].len, "str_utf8_len case %zu: %d (want %d)", i,
              str_utf8_len(chars[i].s), chars[i].len);
    char twice[64], once[64];
    str_escape("\x1b\xff\n", once, sizeof(once));
    str_escape(once, twice, sizeof(twice));
    tt_ok(strcmp(once, twice) == 0, "escaping escaped text changes nothing (%s)", twice);
    return tt_done();
}
