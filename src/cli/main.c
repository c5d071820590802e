/* kiln — the entry point: global options and the dispatch to a command. */
#include "cli/cli.h"
#include "cli/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every command and the function that runs it (its synopsis is
 * common.c's). */
static const struct cli_cmd {
    const char *name;
    int (*fn)(int, char **);
} cmds[] = {
    {"run", cli_run},
    {"chat", cli_chat},
    {"show", cli_show},
    {"tokenize", cli_tokenize},
    {"bench", cli_bench},
    {"quantize", cli_quantize},
    {"serve", cli_serve},
    {"embed", cli_embed},
    {"image", cli_image},
    {"rerank", cli_rerank},
    {"decide", cli_decide},
    {"pull", cli_pull},
    {"transcribe", cli_transcribe},
    {"import", cli_import},
    {"ls", cli_ls},
    {"rm", cli_rm},
    {"verify", cli_verify},
    {"gc", cli_gc},
    {"cp", cli_cp},
    {"backends", cli_backends},
    {"engines", cli_engines},
    {"ps", cli_ps},
    {"stop", cli_stop},
};

static const struct cli_cmd *find_cmd(const char *name) {
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(name, cmds[i].name)) return &cmds[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        cli_usage_all(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") && argc > 2) { /* kiln help CMD: kiln CMD --help */
        const struct cli_cmd *h = find_cmd(argv[2]);
        if (!h) {
            fprintf(stderr, "kiln: unknown command '%s' (see kiln --help)\n", argv[2]);
            return 2;
        }
        if (h->fn == cli_serve) {
            char *sv[] = {"serve", "--help", NULL};
            return cli_serve(2, sv);
        }
        cli_usage(h->name, stdout);
        return 0;
    }
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        cli_usage_all(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("kiln %s (%s)\n", KILN_VERSION, kiln_cpu_path());
        return 0;
    }
    const struct cli_cmd *c = find_cmd(cmd);
    if (!c) {
        fprintf(stderr, "kiln: unknown command '%s' (see kiln --help)\n", cmd);
        return 2;
    }
    /* kiln CMD --help (the first argument; later, -h could be a value) */
    if (argc > 2 && cli_is_help(argv[2]) && c->fn != cli_serve) {
        cli_usage(cmd, stdout);
        return 0;
    }
    /* --store DIR anywhere selects the model store for every command */
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--store")) {
            setenv("KILN_STORE", argv[i + 1], 1);
            memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 1) * sizeof *argv);
            argc -= 2;
            i--;
        }
    /* --no-repack anywhere: every model load keeps the file's layout */
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--no-repack")) {
            setenv("KILN_REPACK", "0", 1);
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
            argc -= 1;
            i--;
        }
    return c->fn(argc - 1, argv + 1);
}
