/*
 * The kiln command line, run as a user would (KILN_BIN, set by ctest):
 * stdout carries only the continuation, errors are one line and a non-zero
 * exit, bench -o json has the fields llama-bench users script against.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *bin;

/* Runs a shell command; captures stdout (and stderr separately). */
static int run(const char *args, char **out, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s >/tmp/kiln-cli-out.txt 2>/tmp/kiln-cli-err.txt", bin, args);
    int rc = system(cmd);
    *out = t_read_file("/tmp/kiln-cli-out.txt", NULL);
    *err = t_read_file("/tmp/kiln-cli-err.txt", NULL);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int main(void) {
    bin = getenv("KILN_BIN");
    if (!bin) {
        fprintf(stderr, "KILN_BIN is not set\n");
        return 1;
    }
    char *o, *e;
    int rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 40 --temp 0", &o, &e);
    CHECK(rc == 0);
    CHECKF(o && !strcmp(o, " ball. He liked to play with his toys. He liked to play with his toys and run around the room. He saw a big"),
           "stdout: '%s'", o ? o : "");
    CHECK(e && strstr(e, "generated 40 tokens"));
    free(o); free(e);

    /* a seed fixes a sampled continuation */
    char *o2, *e2;
    rc = run("run -m ../models/stories260K.gguf -p 'Once' -n 30 --temp 0.9 --seed 7", &o, &e);
    int rc2 = run("run -m ../models/stories260K.gguf -p 'Once' -n 30 --temp 0.9 --seed 7", &o2, &e2);
    CHECK(rc == 0 && rc2 == 0 && o && o2 && strlen(o) > 0 && !strcmp(o, o2));
    free(o); free(e); free(o2); free(e2);

    /* prompt + n over the context: an error with the numbers, no output */
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 100 -c 64", &o, &e);
    CHECK(rc != 0 && o && !*o && e && strstr(e, "(7 tokens) plus 100") && strstr(e, "64"));
    free(o); free(e);

    rc = run("tokenize -m ../models/stories260K.gguf -p 'Tom had a red' --json", &o, &e);
    CHECK(rc == 0 && o && !strcmp(o, "[1, 274, 287, 381, 261, 352, 266]\n"));
    free(o); free(e);

    rc = run("show ../models/stories260K.gguf", &o, &e);
    CHECK(rc == 0 && o && strstr(o, "llama.block_count") && strstr(o, "blk.4.ffn_down.weight") &&
          strstr(o, "runnable:  yes") && strstr(o, "292800"));
    free(o); free(e);

    rc = run("bench -m ../models/stories260K.gguf -p 16 -n 8 -r 2 -t 1 -o json", &o, &e);
    CHECK(rc == 0);
    json_error_t je;
    json_t *j = o ? json_loads(o, 0, &je) : NULL;
    CHECKF(j && json_is_array(j) && json_array_size(j) == 2, "bench json: %s", o ? o : "");
    if (j && json_array_size(j) == 2) {
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "test")), "pp16"));
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 1), "test")), "tg8"));
        CHECK(json_real_value(json_object_get(json_array_get(j, 1), "avg_ts")) > 0);
        CHECK(json_string_value(json_object_get(json_array_get(j, 0), "cpu_path")) != NULL);
    }
    json_decref(j);
    free(o); free(e);

    rc = run("bench -m ../models/stories260K.gguf -p 16 -n 8 -r 1", &o, &e);
    CHECK(rc == 0 && o && strstr(o, "| pp16 |") && strstr(o, "| tg8 |") && strstr(o, "±"));
    free(o); free(e);

    rc = run("quantize ../models/stories260K.gguf /tmp/kiln-cli-q8.gguf q8_0", &o, &e);
    CHECK(rc == 0);
    free(o); free(e);
    rc = run("run -m /tmp/kiln-cli-q8.gguf -p 'Tom had a red' -n 8 --temp 0", &o, &e);
    CHECK(rc == 0 && o && strlen(o) > 0);
    free(o); free(e);
    remove("/tmp/kiln-cli-q8.gguf");

    rc = run("frobnicate", &o, &e);
    CHECK(rc == 2 && e && strstr(e, "unknown command"));
    free(o); free(e);
    rc = run("run -m /nonexistent.gguf -p x", &o, &e);
    CHECK(rc == 1 && e && strstr(e, "/nonexistent.gguf") && strchr(e, '\n') == e + strlen(e) - 1);
    free(o); free(e);
    remove("/tmp/kiln-cli-out.txt");
    remove("/tmp/kiln-cli-err.txt");
    return t_done();
}
