/* kiln engines: the registry listing (kiln_engine_listing) as a table or
 * JSON.  Loads, installs and downloads nothing. */
#include "cli/cli.h"
#include "cli/common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void join(json_t *arr, char *buf, size_t cap) {
    size_t n = 0, i;
    json_t *v;
    buf[0] = 0;
    json_array_foreach(arr, i, v) n +=
        (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", i ? "," : "", json_string_value(v));
}

int cli_engines(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_help("engines", argv[i])) return 0;
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "kiln engines: unknown option '%s'\n", argv[i]);
            cli_usage("engines", stderr);
            return 2;
        }
    }
    kiln_store *s = NULL;
    if (kiln_store_open(NULL, &s) != KILN_OK) return cli_fail("store");
    char *text = NULL;
    kiln_status st = kiln_engine_listing(s, &text);
    kiln_store_close(s);
    if (st != KILN_OK) return cli_fail("engines");
    if (json) {
        puts(text);
        kiln_store_free_string(text);
        return 0;
    }
    json_t *arr = json_loads(text, 0, NULL);
    kiln_store_free_string(text);
    size_t i;
    json_t *f;
    json_array_foreach(arr, i, f) {
        char tasks[128], be[64];
        join(json_object_get(f, "tasks"), tasks, sizeof tasks);
        join(json_object_get(f, "backends"), be, sizeof be);
        json_t *models = json_object_get(f, "models");
        printf("%s%-10s %s  (tasks: %s; backends: %s; %d built-in%s)%s\n", i ? "\n" : "",
               json_string_value(json_object_get(f, "key")), json_string_value(json_object_get(f, "display_name")),
               tasks, be, (int)json_integer_value(json_object_get(f, "builtin_count")),
               json_integer_value(json_object_get(f, "builtin_count")) == 1 ? "" : "s",
               json_is_true(json_object_get(f, "available")) ? "" : "  [not in this build]");
        if (!json_array_size(models)) {
            printf("  (no models in the store)\n");
            continue;
        }
        size_t k;
        json_t *m;
        json_array_foreach(models, k, m) {
            const char *state = json_string_value(json_object_get(m, "state"));
            char shown[600];
            if (!strcmp(state, "files-missing"))
                snprintf(shown, sizeof shown, "files missing (%s)", json_string_value(json_object_get(m, "file")));
            else if (!strcmp(state, "not-supported") || !strcmp(state, "damaged"))
                snprintf(shown, sizeof shown, "%s (%s)", !strcmp(state, "damaged") ? "damaged" : "not supported",
                         json_string_value(json_object_get(m, "reason")));
            else if (!strcmp(state, "not-downloaded"))
                snprintf(shown, sizeof shown, "not downloaded (%s)",
                         json_string_value(json_object_get(m, "published_size")));
            else
                snprintf(shown, sizeof shown, "installed%s",
                         json_object_get(m, "verify") ? " (re-hashed at the next load)" : "");
            printf("  %-28s %s%s\n", json_string_value(json_object_get(m, "name")),
                   json_is_true(json_object_get(m, "builtin")) ? "built-in, " : "", shown);
        }
    }
    json_decref(arr);
    return 0;
}
