/* main.c - the towertrain command: run, resume, bench, validate, eval, plot, profile.
 *
 * Every error comes back here as a tt_err and is printed as one line,
 * "towertrain: ...", with exit status 2 for bad usage or input and 1 for runtime
 * failures (towertrain(1), EXIT STATUS). Nothing is written to the log directory before the job,
 * the data and the model have all been checked.
 *
 * Under mpirun every rank runs this same program; rank 0 alone takes the log
 * directory and prints, and an error on any rank ends every rank (MPI_Abort)
 * with that rank's message, so a job never hangs on a rank that is gone.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "checkpoint/checkpoint.h"
#include "bench/bench.h"
#include "comm/dist.h"
#include "config/job.h"
#include "dataflow/image_decode.h"
#include "eval/eval.h"
#include "profile/profile.h"
#include "plot/plot.h"
#include "train/trainer.h"
#include "util/err.h"
#include "util/cmdline.h"
#include "util/fileio.h"
#include "util/log.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0"
#endif

#define MAX_SETS 256

static const char usage[] =
    "usage: towertrain run JOB.cfg [--logdir DIR] [--set KEY=VALUE]... [--quiet]\n"
    "       towertrain resume LOGDIR|CHECKPOINT.safetensors [--max-epoch N] [--set KEY=VALUE]... [--quiet]\n"
    "       towertrain bench [options]\n"
    "       towertrain validate JOB.cfg [--set KEY=VALUE]...\n"
    "       towertrain eval LOGDIR|CHECKPOINT.safetensors [--job JOB.cfg] [--set KEY=VALUE]... [--json FILE]\n"
    "       towertrain plot LOGDIR [-o FILE.svg]\n"
    "       towertrain profile JOB.cfg [--steps N] [--set KEY=VALUE]... [--json FILE] [--trace FILE]\n"
    "       towertrain --help | --version\n"
    "See towertrain(1) and towertrain.cfg(5).\n";

/* Under mpirun every rank's stderr reaches one terminal: say whose it is,
 * and write the line with one call (stderr is unbuffered: one write), so that
 * another rank's line or mpirun's own cannot land inside it. */
static int fail(const tt_err *err)
{
    char rank[32] = "";
    if (dist_size() > 1)
        snprintf(rank, sizeof(rank), "rank %d: ", dist_rank());
    fprintf(stderr, "towertrain: %s%s\n", rank, err->msg);
    return err->code == TT_OK ? 1 : err->code;
}

/* fmt has one %s: arg, a command-line word, escaped by err_set as every
 * message is. */
static int usage_error(const char *fmt, const char *arg)
{
    char text[512];
    snprintf(text, sizeof(text), fmt, arg);
    tt_err err = {0};
    err_set(&err, TT_ERR_USAGE, "%s (see towertrain --help)", text);
    return fail(&err);
}

/* The commands, as bits of an option's `cmds`. */
enum { CMD_RUN = 1, CMD_RESUME = 2, CMD_VALIDATE = 4, CMD_EVAL = 8, CMD_PLOT = 16,
       CMD_PROFILE = 32, CMD_BENCH = 64 };

/* Every option of every command: the one table the command line is read by,
 * and what `towertrain CMD --help` prints. */
typedef struct {
    const char *name;  /* "--set", "-o" */
    unsigned cmds;     /* the commands that take it */
    const char *value; /* what its value is, for the help and the errors; NULL: a flag */
    const char *help;
} option_spec;

static const option_spec options[] = {
    {"--logdir", CMD_RUN, "DIR", "the log directory (overrides the job's logdir)"},
    {"--set", CMD_RUN | CMD_RESUME | CMD_VALIDATE | CMD_EVAL | CMD_PROFILE, "KEY=VALUE",
     "overrides one key of the job (repeatable)"},
    {"--max-epoch", CMD_RESUME, "N", "trains until epoch N"},
    {"--quiet", CMD_RUN | CMD_RESUME, NULL, "prints nothing on standard output"},
    {"--job", CMD_EVAL, "JOB.cfg", "the job to read the data and model from"},
    {"--json", CMD_EVAL | CMD_PROFILE | CMD_BENCH, "FILE", "also writes the results as JSON"},
    {"--steps", CMD_PROFILE, "N", "steps to time (default 20)"},
    {"--trace", CMD_PROFILE, "FILE", "writes a Chrome trace of the steps"},
    {"-o", CMD_PLOT, "FILE.svg", "the SVG to write (default LOGDIR/stats.svg)"},
    {"--device", CMD_BENCH, "cpu|gpu", "the towers' device (default cpu)"},
    {"--towers", CMD_BENCH, "N", "towers (default: the cores; gpu: every GPU)"},
    {"--algo", CMD_BENCH, "ALGO", "ring, naive, hierarchical, all, mpi; nccl on GPUs"},
    {"-b", CMD_BENCH, "BYTES", "the smallest size (default 8)"},
    {"-e", CMD_BENCH, "BYTES", "the largest size (default 128M)"},
    {"-f", CMD_BENCH, "F", "the factor between sizes (default 2)"},
    {"-n", CMD_BENCH, "N", "timed iterations per size (default 20)"},
    {"-w", CMD_BENCH, "N", "warm-up iterations per size (default 5)"},
    {"-c", CMD_BENCH, "0|1", "checks the results (default 1)"},
};
#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

/* Each command: its name, its bit, its usage line (the words after the
 * command's name) and how many arguments it takes besides options. */
typedef struct {
    const char *name;
    unsigned bit;
    const char *args;
    const char *target_name; /* its one argument, for "missing ..."; NULL: none */
} command_spec;

static const command_spec commands[] = {
    {"run", CMD_RUN, "JOB.cfg [options]", "the job file"},
    {"resume", CMD_RESUME, "LOGDIR|CHECKPOINT.safetensors [options]",
     "the log directory or checkpoint"},
    {"validate", CMD_VALIDATE, "JOB.cfg [options]", "the job file"},
    {"eval", CMD_EVAL, "LOGDIR|CHECKPOINT.safetensors [options]",
     "the log directory or checkpoint"},
    {"plot", CMD_PLOT, "LOGDIR [options]", "the log directory"},
    {"profile", CMD_PROFILE, "JOB.cfg [options]", "the job file"},
    {"bench", CMD_BENCH, "[options]", NULL},
};

static const command_spec *command_find(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* towertrain CMD --help: its usage line and its options, from the table. */
static int command_help(const command_spec *c)
{
    printf("usage: towertrain %s %s\noptions:\n", c->name, c->args);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (!(options[i].cmds & c->bit))
            continue;
        char head[64];
        snprintf(head, sizeof(head), "%s%s%s", options[i].name, options[i].value ? " " : "",
                 options[i].value ? options[i].value : "");
        printf("  %-22s %s\n", head, options[i].help);
    }
    printf("  %-22s %s\nSee towertrain(1).\n", "--help", "prints this");
    return 0;
}

/* usage_error with the command's name first: fmt has one %s, arg. */
static int command_error(const command_spec *c, const char *fmt, const char *arg)
{
    char with_cmd[160];
    snprintf(with_cmd, sizeof(with_cmd), "%s: %s", c->name, fmt);
    return usage_error(with_cmd, arg);
}

/* A command line read by the table: the options in their order, with their
 * values, and the one argument. */
typedef struct {
    cmdline_opt opts[MAX_SETS + 32];
    int n_opts;
    const char *target;
} cmdline;

/* Reads argv (the words after the command's name) by the table: an option's
 * value is the next word or follows '=' ("--max-epoch=5", "-o=x.svg"). */
static int cmdline_read(const command_spec *c, int argc, char **argv, cmdline *cl)
{
    memset(cl, 0, sizeof(*cl));
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (s[0] != '-' || s[1] == '\0') {
            if (cl->target != NULL || c->target_name == NULL)
                return command_error(c, "unexpected argument '%s'", s);
            cl->target = s;
            continue;
        }
        const char *eq = strchr(s, '=');
        size_t len = eq != NULL ? (size_t)(eq - s) : strlen(s);
        const option_spec *o = NULL;
        for (size_t k = 0; k < N_OPTIONS && o == NULL; k++)
            if ((options[k].cmds & c->bit) && strlen(options[k].name) == len &&
                strncmp(options[k].name, s, len) == 0)
                o = &options[k];
        if (o == NULL)
            return command_error(c, "unknown option '%s'", s);
        if (o->value == NULL && eq != NULL)
            return command_error(c, "%s takes no value", o->name);
        const char *v = eq != NULL ? eq + 1 : NULL;
        if (o->value != NULL && v == NULL && ++i < argc)
            v = argv[i];
        if (o->value != NULL && v == NULL) {
            char what[96];
            snprintf(what, sizeof(what), "%s needs %s", o->name, o->value);
            return command_error(c, "%s", what);
        }
        if (cl->n_opts == MAX_SETS + 32)
            return command_error(c, "%s: too many options", s);
        cl->opts[cl->n_opts++] = (cmdline_opt){o->name, v};
    }
    if (cl->target == NULL && c->target_name != NULL)
        return command_error(c, "missing %s", c->target_name);
    return 0;
}

typedef struct {
    const char *target;    /* the job file; resume, eval: the log directory or checkpoint */
    const char *job;       /* eval: --job JOB.cfg */
    const char *json;      /* eval, profile: --json FILE */
    const char *trace;     /* profile: --trace FILE */
    int steps;             /* profile: --steps N */
    job_override sets[MAX_SETS + 2]; /* --set, then --logdir and --max-epoch as overrides */
    int n_sets;
    bool quiet;
    char logdir_set[4500]; /* --logdir DIR as the override logdir="DIR" */
    char max_epoch_set[64];
} cmd_args;

/* An integer option's value from lo to hi, or -1 after the usage error. */
static long option_int(const char *name, const char *v, long lo, long hi)
{
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*v != '\0' && *end == '\0' && n >= lo && n <= hi)
        return n;
    char what[160];
    snprintf(what, sizeof(what), "%s %.40s: must be an integer from %ld to %ld", name, v, lo, hi);
    usage_error("%s", what);
    return -1;
}

/* The options of run, resume, validate, eval and profile, read into a. */
static int parse_args(int argc, char **argv, const char *cmd, cmd_args *a)
{
    memset(a, 0, sizeof(*a));
    static cmdline cl;
    int rc = cmdline_read(command_find(cmd), argc, argv, &cl);
    if (rc != 0)
        return rc;
    a->target = cl.target;
    const char *logdir = NULL;
    for (int i = 0; i < cl.n_opts; i++) {
        const char *n = cl.opts[i].name, *v = cl.opts[i].value;
        bool empty = v != NULL && *v == '\0';
        long k;
        if (strcmp(n, "--set") == 0) {
            if (a->n_sets == MAX_SETS)
                return usage_error("%s: too many overrides", "--set");
            a->sets[a->n_sets++].arg = v;
        } else if (empty) {
            return usage_error("%s needs a value", n);
        } else if (strcmp(n, "--logdir") == 0) {
            if (strchr(v, '"') || strchr(v, '\\'))
                return usage_error("--logdir %s: quotes and backslashes are not supported", v);
            logdir = v;
        } else if (strcmp(n, "--max-epoch") == 0) {
            if ((k = option_int(n, v, 1, 1000000000)) < 0)
                return TT_ERR_USAGE;
            snprintf(a->max_epoch_set, sizeof(a->max_epoch_set), "max_epoch=%ld", k);
        } else if (strcmp(n, "--steps") == 0) {
            if ((k = option_int(n, v, 1, 100000)) < 0)
                return TT_ERR_USAGE;
            a->steps = (int)k;
        } else if (strcmp(n, "--quiet") == 0) {
            a->quiet = true;
        } else {
            *(strcmp(n, "--job") == 0 ? &a->job : strcmp(n, "--json") == 0 ? &a->json
                                                                            : &a->trace) = v;
        }
    }
    if (logdir != NULL) {
        snprintf(a->logdir_set, sizeof(a->logdir_set), "logdir=\"%s\"", logdir);
        a->sets[a->n_sets++].arg = a->logdir_set;
    }
    if (a->max_epoch_set[0])
        a->sets[a->n_sets++].arg = a->max_epoch_set;
    return 0;
}

/* The job file a command names, with its --set overrides, loaded and its
 * files checked; else the error printed and the exit status returned. */
static int load_job(const cmd_args *a, job_t *job)
{
    tt_err err = {0};
    if (job_load(a->target, a->sets, a->n_sets, job, &err) != 0)
        return fail(&err);
    if (job_check_files(job, &err) != 0) {
        job_free(job);
        return fail(&err);
    }
    return 0;
}

static int cmd_validate(int argc, char **argv)
{
    cmd_args a;
    int rc = parse_args(argc, argv, "validate", &a);
    if (rc != 0)
        return rc;
    job_t job;
    if ((rc = load_job(&a, &job)) != 0)
        return rc;
    rc = job_write(&job, stdout) == 0 && fflush(stdout) == 0 ? 0 : 1;
    job_free(&job);
    return rc;
}

/* Writes <logdir>/job.cfg atomically: what `resume` reads back. */
static int write_job_file(const job_t *job, tt_err *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    int bad = job_write(job, mem);
    if (fclose(mem) != 0 || bad != 0) {
        free(text);
        return err_set(err, TT_ERR_RUNTIME, "cannot format the resolved job");
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/job.cfg", job->logdir);
    int rc = file_write_atomic(path, text, len, err);
    free(text);
    return rc;
}

/* Takes back the job.cfg write_job_file wrote, when the run cannot start. */
static void unlink_job_file(const job_t *job)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/job.cfg", job->logdir);
    unlink(path);
}

/* A log directory that already holds a run is never overwritten. */
static int check_logdir_free(const job_t *job, tt_err *err)
{
    if (dist_rank() != 0)
        return 0; /* rank 0's to take */
    static const char *const files[] = {"job.cfg", "stats.json", "checkpoint"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", job->logdir, files[i]);
        if (path_exists(path))
            return err_set(err, TT_ERR_USAGE, "logdir %s already holds a run (%s); resume it "
                           "or choose another --logdir", job->logdir, files[i]);
    }
    return 0;
}

/* SIGINT / SIGTERM: the first asks the trainer to finish its step, write a
 * checkpoint and stop (exit 130 / 143); a second one exits at once. */
static void on_stop_signal(int signo)
{
    if (trainer_stop_signal != 0)
        _exit(128 + signo);
    trainer_stop_signal = signo;
}

static void install_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    backend_device_set_stop(&trainer_stop_signal); /* device waits see it (issue 27) */
}

/* Everything is checked: takes the log directory, writes job.cfg, trains
 * (resume: from the checkpoint `from`, or from the beginning when NULL).
 * Returns the exit status. */
static int train_in_logdir(job_t *job, trainer_t *tr, const char *what, const char *from)
{
    tt_err err = {0};
    char log_path[4200];
    snprintf(log_path, sizeof(log_path), "%s/log.log", job->logdir);
    bool writer = dist_rank() == 0;
    char made[4200]; /* what dir_create makes, removed again if the start fails */
    dir_first_missing(job->logdir, made, sizeof(made));
    if (writer && (dir_create(job->logdir, &err) != 0 || write_job_file(job, &err) != 0)) {
        dir_remove_made(job->logdir, made);
        return fail(&err);
    }
    if (writer && log_open(log_path) != 0) {
        err_set(&err, TT_ERR_RUNTIME, "cannot open %s", log_path);
        unlink_job_file(job);
        dir_remove_made(job->logdir, made);
        return fail(&err);
    }
    log_printf("towertrain %s: %s job %s, logdir %s\n", PACKAGE_VERSION, what, job->path,
               job->logdir);
    if (from != NULL)
        log_printf("resuming from %s: global step %lld, epoch %lld next\n", from,
                   (long long)tr->global_step, (long long)tr->epoch_num);
    else if (strcmp(what, "resume") == 0)
        log_printf("no checkpoint yet (the run stopped before its first): starting the job "
                   "from the beginning\n");
    if (writer) /* the debris of a run killed mid-write */
        dir_remove_dead_temps(job->logdir);
    if (dist_size() > 1)
        log_printf("%d MPI ranks x %d tower(s): global batch %d\n", dist_size(), tr->n_towers,
                   tr->global_batch);
    install_stop_signals();
    int rc = trainer_train(tr, &err);
    if (rc == TT_STOPPED_BY_SIGNAL) {
        log_printf("stopped; continue with: towertrain resume %s\n", job->logdir);
        rc = 128 + (int)trainer_stop_signal;
    } else if (rc != 0) {
        log_printf("towertrain: %s\n", err.msg);
        rc = fail(&err);
    } else {
        log_printf("training finished: epoch %lld, global step %lld\n",
                   (long long)tr->epoch_num - 1, (long long)tr->global_step);
    }
    log_close();
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    cmd_args a;
    int rc = parse_args(argc, argv, "run", &a);
    if (rc != 0)
        return rc;
    log_set_quiet(a.quiet);
    job_t job;
    tt_err err = {0};
    if ((rc = load_job(&a, &job)) != 0)
        return rc;
    trainer_t tr = {0};
    if (check_logdir_free(&job, &err) != 0 || trainer_create(&tr, &job, &err) != 0)
        rc = fail(&err);
    else
        rc = train_in_logdir(&job, &tr, "run", NULL);
    if (tr.job != NULL)
        trainer_free(&tr);
    job_free(&job);
    return rc;
}

/* The log directory and checkpoint a LOGDIR|CHECKPOINT argument names (resume,
 * eval): a directory's latest checkpoint, or a file and the directory it is in. */
static int locate_checkpoint(const char *cmd, const char *target, char *logdir, size_t ld_len,
                             char *ckpt, size_t ck_len, tt_err *err)
{
    struct stat st;
    char real[4400];
    if (stat(target, &st) != 0)
        return err_set(err, TT_ERR_USAGE, "%s: %s: no such log directory or checkpoint", cmd,
                       target);
    if (realpath(target, real) == NULL)
        return err_set(err, TT_ERR_USAGE, "%s: %s: cannot resolve the path", cmd, target);
    snprintf(logdir, ld_len, "%s", real);
    if (S_ISDIR(st.st_mode))
        return checkpoint_latest(logdir, ckpt, ck_len, err);
    snprintf(ckpt, ck_len, "%s", real);
    *strrchr(logdir, '/') = '\0';
    return 0;
}

/* A log directory whose run stopped before its first checkpoint (job.cfg,
 * no checkpoint pointer, no epoch in stats.json) is resumed from the
 * beginning: `run` refuses it as taken, so resume must take it. */
static bool stopped_before_checkpoint(const char *target)
{
    char path[4500];
    struct stat st;
    if (stat(target, &st) != 0 || !S_ISDIR(st.st_mode))
        return false;
    snprintf(path, sizeof(path), "%s/checkpoint", target);
    if (path_exists(path))
        return false;
    snprintf(path, sizeof(path), "%s/job.cfg", target);
    if (!path_exists(path))
        return false;
    snprintf(path, sizeof(path), "%s/stats.json", target);
    char *text = NULL;
    size_t len = 0;
    tt_err ignored = {0};
    if (!path_exists(path))
        return true;
    if (file_read_all(path, &text, &len, &ignored) != 0)
        return false;
    cJSON *stats = cJSON_ParseWithLength(text, len);
    bool empty = cJSON_IsArray(stats) && cJSON_GetArraySize(stats) == 0;
    cJSON_Delete(stats);
    free(text);
    return empty;
}

/* towertrain resume LOGDIR|CHECKPOINT [--max-epoch N] [--set KEY=VALUE]... [--quiet] */
static int cmd_resume(int argc, char **argv)
{
    cmd_args a;
    int rc = parse_args(argc, argv, "resume", &a);
    if (rc != 0)
        return rc;
    const char *target = a.target;
    log_set_quiet(a.quiet);

    tt_err err = {0};
    char logdir[4400], ckpt[4400] = "", job_path[4500];
    bool from_start = stopped_before_checkpoint(target);
    if (from_start && realpath(target, logdir) == NULL)
        from_start = false;
    if (!from_start &&
        locate_checkpoint("resume", target, logdir, sizeof(logdir), ckpt, sizeof(ckpt), &err) != 0)
        return fail(&err);
    if (strchr(logdir, '"') || strchr(logdir, '\\')) {
        err_set(&err, TT_ERR_USAGE, "resume: %s: quotes and backslashes are not supported", logdir);
        return fail(&err);
    }
    /* the log directory is where the run is now, even if it was moved */
    snprintf(a.logdir_set, sizeof(a.logdir_set), "logdir=\"%s\"", logdir);
    a.sets[a.n_sets++].arg = a.logdir_set;
    snprintf(job_path, sizeof(job_path), "%s/job.cfg", logdir);

    job_t job;
    if (job_load_resolved(job_path, a.sets, a.n_sets, &job, &err) != 0)
        return fail(&err);
    trainer_t tr = {0};
    if (job_check_files(&job, &err) != 0 || trainer_create(&tr, &job, &err) != 0 ||
        (!from_start && trainer_restore(&tr, ckpt, &err) != 0)) {
        rc = fail(&err);
    } else if (tr.epoch_num > tr.max_epoch) {
        if (!a.quiet) /* --quiet: nothing on standard output */
            printf("towertrain: %s is already at epoch %lld of max_epoch %lld; nothing to do "
                   "(raise it with --max-epoch)\n", ckpt, (long long)tr.epoch_num - 1,
                   (long long)tr.max_epoch);
        rc = 0;
    } else {
        rc = train_in_logdir(&job, &tr, "resume", from_start ? NULL : ckpt);
    }
    if (tr.job != NULL)
        trainer_free(&tr);
    job_free(&job);
    return rc;
}

/* towertrain eval LOGDIR|CHECKPOINT [--job JOB.cfg] [--set KEY=VALUE]... [--json FILE]
 * Reads the checkpoint, the job and the data; writes nothing but --json. */
static int cmd_eval(int argc, char **argv)
{
    cmd_args a;
    int rc = parse_args(argc, argv, "eval", &a);
    if (rc != 0)
        return rc;
    const char *target = a.target, *job_file = a.job, *json = a.json;
    tt_err err = {0};
    char logdir[4400], ckpt[4400], job_path[4500];
    if (locate_checkpoint("eval", target, logdir, sizeof(logdir), ckpt, sizeof(ckpt), &err) != 0)
        return fail(&err);
    job_t job;
    if (job_file != NULL) {
        if (job_load(job_file, a.sets, a.n_sets, &job, &err) != 0)
            return fail(&err);
    } else {
        snprintf(job_path, sizeof(job_path), "%s/job.cfg", logdir);
        if (!path_exists(job_path)) {
            err_set(&err, TT_ERR_USAGE, "eval: %s: no job.cfg beside the checkpoint; name the "
                    "job with --job JOB.cfg", logdir);
            return fail(&err);
        }
        if (job_load_resolved(job_path, a.sets, a.n_sets, &job, &err) != 0)
            return fail(&err);
    }
    dataflow_cfg *owned = NULL;
    const char *what = NULL;
    const dataflow_cfg *df = eval_pick_dataflow(&job, &owned, &what, &err);
    eval_result r = {0};
    if (df == NULL || eval_run(&job, df, ckpt, &r, &err) != 0 ||
        (json != NULL && dist_rank() == 0 && eval_write_json(&r, json, &err) != 0)) {
        rc = fail(&err);
    } else {
        eval_print(&r, what, stdout);
        if (fflush(stdout) != 0)
            rc = 1;
    }
    eval_result_free(&r);
    eval_dataflow_free(owned);
    job_free(&job);
    return rc;
}

/* towertrain plot LOGDIR [-o FILE.svg] */
static int cmd_plot(int argc, char **argv)
{
    static cmdline cl;
    int rc = cmdline_read(command_find("plot"), argc, argv, &cl);
    if (rc != 0)
        return rc;
    const char *logdir = cl.target, *out = cl.n_opts > 0 ? cl.opts[cl.n_opts - 1].value : NULL;
    char svg[4200];
    snprintf(svg, sizeof(svg), "%s", out ? out : "");
    if (out == NULL)
        snprintf(svg, sizeof(svg), "%s/stats.svg", logdir);
    tt_err err = {0};
    if (plot_logdir_svg(logdir, svg, &err) != 0)
        return fail(&err);
    printf("wrote %s\n", svg);
    return 0;
}

static int cmd_bench(int argc, char **argv)
{
    static cmdline cl;
    int rc = cmdline_read(command_find("bench"), argc, argv, &cl);
    if (rc != 0)
        return rc;
    bench_opts o;
    tt_err err = {0};
    if (bench_parse(cl.opts, cl.n_opts, &o, &err) != 0)
        return fail(&err);
    long wrong = bench_run(&o, &err);
    if (wrong < 0)
        return fail(&err);
    return wrong == 0 ? 0 : 1;
}

/* towertrain profile JOB.cfg [--steps N] [--set KEY=VALUE]... [--json FILE] [--trace FILE]
 * Builds the job and times N steps; writes nothing but --json and --trace. */
static int cmd_profile(int argc, char **argv)
{
    cmd_args a;
    int rc = parse_args(argc, argv, "profile", &a);
    if (rc != 0)
        return rc;
    job_t job;
    tt_err err = {0};
    if ((rc = load_job(&a, &job)) != 0)
        return rc;
    profile_opts o = {a.target, a.steps > 0 ? a.steps : 20, a.json, a.trace};
    if (profile_run(&job, &o, &err) != 0)
        rc = fail(&err);
    job_free(&job);
    return rc;
}

/* run, resume, bench and eval: the commands that may span MPI ranks. Ranks
 * other than 0 print only their errors. */
static int distributed(const char *cmd, int argc, char **argv)
{
    tt_err err = {0};
    if (dist_init(&argc, &argv, &err) != 0)
        return fail(&err);
    if (dist_rank() != 0 && freopen("/dev/null", "w", stdout) == NULL)
        log_set_quiet(true);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc, argv);
    if (strcmp(cmd, "resume") == 0)
        return cmd_resume(argc, argv);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc, argv);
    if (strcmp(cmd, "profile") == 0)
        return cmd_profile(argc, argv);
    return cmd_bench(argc, argv);
}

/* An error on one rank ends all of them; a success (or a stop every rank
 * agreed on) leaves MPI cleanly. */
static int finish(int rc)
{
    bool stopped = rc == 128 + SIGINT || rc == 128 + SIGTERM;
    if (rc != 0 && !stopped && dist_size() > 1)
        dist_abort(rc);
    dist_finalize();
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return TT_ERR_USAGE;
    }
    const char *cmd = argv[1];
    bool help = strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0;
    if ((help || strcmp(cmd, "--version") == 0) && argc > 2) {
        fprintf(stderr, "towertrain: %s takes no argument (got '%s')\n", cmd, argv[2]);
        return TT_ERR_USAGE;
    }
    if (help) {
        fputs(usage, stdout);
        return 0;
    }
    /* "towertrain CMD ... --help" anywhere on the line: CMD's usage and options */
    const command_spec *c = command_find(cmd);
    for (int i = 2; c != NULL && i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return command_help(c);
    if (strcmp(cmd, "--version") == 0) {
        printf("towertrain %s (backends: %s%s; images: %s)\n", PACKAGE_VERSION,
               backend_list_built(), dist_built() ? " mpi" : "", image_formats_built());
        /* what the CPU backend computes in here: bf16 needs oneDNN and the CPU */
        char why[256];
        const char *bf16 = backend_cpu_bf16_isa(why, sizeof(why));
        if (bf16 != NULL) {
            printf("cpu precision: fp32 bf16 (bf16 on %s)\n", bf16);
            const char *fp32_why = backend_cpu_bf16_fp32_why();
            if (fp32_why != NULL)
                printf("cpu bf16: computed in fp32 here: %s\n", fp32_why);
        } else
            printf("cpu precision: fp32 (bf16 %s)\n", why);
        char kernels[160];
        printf("cpu kernels: %s\n", backend_cpu_kernels(kernels, sizeof(kernels)));
        /* which GPUs the binary serves, and the libraries it was built against */
        if (backend_cuda_build_info() != NULL)
            printf("%s\n", backend_cuda_build_info());
        return 0;
    }
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "resume") == 0 || strcmp(cmd, "bench") == 0 ||
        strcmp(cmd, "eval") == 0 || strcmp(cmd, "profile") == 0)
        return finish(distributed(cmd, argc - 2, argv + 2));
    if (strcmp(cmd, "validate") == 0)
        return cmd_validate(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0)
        return cmd_plot(argc - 2, argv + 2);
    return usage_error("unknown command '%s'", cmd);
}
