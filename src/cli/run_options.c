/* SPDX-License-Identifier: MIT */
/* A training command's rows for the library's run options; see run_options.h. */
#include "cli/run_options.h"

#include <stdio.h>
#include <string.h>

#include "cli/common.h"

int cli_run_table(cli_run_options *c, opt_spec *opts, const char *cmd)
{
    int n, seen[64] = {0};
    const qkv_run_kind kind = qkv_run_get_kind(c->run);
    const qkv_option *lib = qkv_run_options(kind, &n);
    for (opt_spec *o = opts; o->name; o++) {
        if (o->type != OPT_ALIAS || o->value) continue;
        const int i = qkv_run_option_find(kind, o->name, NULL);
        if (i < 0 || strcmp(lib[i].name, o->name) || seen[i]++) {
            fprintf(stderr, "%s: internal error: --%s is not an option of the run, or twice\n",
                    cmd, o->name);
            return -1;
        }
        const qkv_option *l = &lib[i];
        cli_run_value *v = &c->v[i];
        static const opt_type types[] = {[QKV_OPTION_INT] = OPT_INT,
                                         [QKV_OPTION_FLOAT] = OPT_FLOAT,
                                         [QKV_OPTION_U64] = OPT_U64,
                                         [QKV_OPTION_FLAG] = OPT_FLAG,
                                         [QKV_OPTION_FILE] = OPT_FILE,
                                         [QKV_OPTION_TEXT] = OPT_STRING,
                                         [QKV_OPTION_CHOICE] = OPT_CHOICE};
        *o = (opt_spec){l->name, types[l->type], v, l->help, l->range, l->record};
        if (l->type == QKV_OPTION_CHOICE) v->c = (opt_choice){l->choices, l->choices_local, 0};
    }
    for (int i = 0; i < n; i++)
        if (!seen[i]) {
            fprintf(stderr, "%s: internal error: --%s has no row\n", cmd, lib[i].name);
            return -1;
        }
    return 0;
}

void cli_run_pull(cli_run_options *c)
{
    int n;
    const qkv_option *lib = qkv_run_options(qkv_run_get_kind(c->run), &n);
    for (int i = 0; i < n; i++) {
        cli_run_value *v = &c->v[i];
        switch (lib[i].type) {
        case QKV_OPTION_INT:
        case QKV_OPTION_FLAG: v->i = (int)qkv_run_get_int(c->run, i); break;
        case QKV_OPTION_CHOICE: v->c.value = (int)qkv_run_get_int(c->run, i); break;
        case QKV_OPTION_FLOAT: v->f = qkv_run_get_float(c->run, i); break;
        case QKV_OPTION_U64: v->u = qkv_run_get_u64(c->run, i); break;
        case QKV_OPTION_FILE:
        case QKV_OPTION_TEXT: v->s = qkv_run_get_text(c->run, i); break;
        }
    }
}

int cli_run_push(cli_run_options *c, const char *cmd)
{
    int n;
    const qkv_option *lib = qkv_run_options(qkv_run_get_kind(c->run), &n);
    qkv_error err = {0};
    for (int i = 0; i < n; i++) {
        const cli_run_value *v = &c->v[i];
        qkv_status st = QKV_OK;
        switch (lib[i].type) {
        case QKV_OPTION_INT:
        case QKV_OPTION_FLAG: st = qkv_run_set_int(c->run, i, v->i, &err); break;
        case QKV_OPTION_CHOICE: st = qkv_run_set_int(c->run, i, v->c.value, &err); break;
        case QKV_OPTION_FLOAT: st = qkv_run_set_float(c->run, i, v->f, &err); break;
        case QKV_OPTION_U64: st = qkv_run_set_u64(c->run, i, v->u, &err); break;
        case QKV_OPTION_FILE:
        case QKV_OPTION_TEXT: st = qkv_run_set_text(c->run, i, v->s, &err); break;
        }
        if (st) {
            cli_print_error(cmd, &err);
            return -1;
        }
    }
    cli_run_pull(c); /* the strings now point at the run's copies */
    return 0;
}

/* Claims --out (resuming: then reads what the run recorded and parses the command line again
 * over it), checks the options and hands them to the run. The exit status, or -1 to go on. */
static int train_setup(const cli_train_command *cmd, cli_train *t, opt_spec *opts, int argc,
                       char **argv)
{
    qkv_run *r = t->run.run;
    qkv_error err = {0};
    char holder[1024];
    cli_command_line(holder, sizeof holder, argc, argv);
    if (t->resume && t->overwrite) {
        fprintf(stderr, "%s: --resume continues the run in --out, --overwrite replaces it: "
                "give one\n", cmd->name);
        return 2;
    }
    if (t->out && t->resume) { /* a resumed run claims its directory first: it reads it */
        if (qkv_run_claim(r, t->out, QKV_RUN_RESUME, holder, &err))
            return cli_print_error("qkv", &err), 1;
        cli_run_pull(&t->run);
        if (args_parse(argc, argv, 2, opts, "")) return 2;
    }
    const int rc = cmd->check(t, opts, argc, argv);
    if (rc >= 0) return rc;
    if (!t->resume && qkv_run_claim(r, t->out, t->overwrite ? QKV_RUN_OVERWRITE : QKV_RUN_NEW,
                                    holder, &err))
        return cli_print_error("qkv", &err), 1;
    return -1;
}

int cli_train_main(const cli_train_command *cmd, cli_train *t, opt_spec *opts, int argc,
                   char **argv, cli_ranks *job)
{
    qkv_error err = {0};
    if (qkv_run_create(&t->run.run, cmd->kind, &err)) return cli_print_error("qkv", &err), 1;
    t->bucket_kb = 1024, t->allreduce = (opt_choice){0, ALLREDUCE, 0};
    cmd->table(t, opts);
    int rc = 1;
    if (!cli_run_table(&t->run, opts, cmd->name)) {
        cli_run_pull(&t->run);
        rc = args_parse(argc, argv, 2, opts, cmd->usage);
    }
    if (rc) {
        qkv_run_free(t->run.run);
        return rc > 0 ? 0 : 2;
    }
    const int writer = cli_ranks_writer(job, &t->quiet);
    qkv_run_set_reducer(t->run.run, &job->reducer);
    qkv_run_set_hooks(t->run.run, &(qkv_run_hooks){.notice = cmd->notice});
    rc = train_setup(cmd, t, opts, argc, argv);
    if (rc < 0 && t->allreduce.value == 1 && cli_ranks_overlap(job, t->bucket_kb)) rc = 1;
    if (rc < 0) {
        cli_threads(cli_ranks_threads(job, t->threads));
        rc = cmd->run(t, writer, job->reducer.size);
    }
    qkv_run_free(t->run.run);
    return rc;
}

void cli_print_error(const char *who, const qkv_error *err)
{
    for (const char *line = err->msg; *line;) {
        const size_t n = strcspn(line, "\n");
        fprintf(stderr, "%s: %.*s\n", who, (int)n, line);
        line += n + (line[n] == '\n');
    }
}
