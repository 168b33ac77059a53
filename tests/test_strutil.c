/* test_strutil.c - did-you-mean, path resolution and tag cleaning. */
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
    return tt_done();
}
