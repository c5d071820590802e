/* kiln backends: what this machine can run (kiln_backend_probe), as a table
 * or JSON.  Loads no model, opens no store. */
#include "cli/cli.h"
#include "cli/common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_backends(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_help("backends", argv[i])) return 0;
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "kiln backends: unknown option '%s'\n", argv[i]);
            cli_usage("backends", stderr);
            return 2;
        }
    }
    kiln_backend_status rows[16];
    int n = kiln_backend_probe(rows, 16);
    if (n > 16) n = 16;
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(rows[i].name));
            json_object_set_new(o, "kind", json_string(rows[i].kind));
            json_object_set_new(o, "availability", json_string(kiln_availability_str(rows[i].availability)));
            json_object_set_new(o, "supported", json_boolean(rows[i].supported));
            json_object_set_new(o, "used", json_boolean(rows[i].used));
            json_object_set_new(o, "detail", json_string(rows[i].detail));
            json_array_append_new(arr, o);
        }
        char *s = json_dumps(arr, JSON_INDENT(2));
        json_decref(arr);
        if (!s) return 1;
        puts(s);
        free(s);
        return 0;
    }
    printf("%-16s %-4s %-12s %-5s %s\n", "BACKEND", "KIND", "STATE", "USED", "DETAIL");
    for (int i = 0; i < n; i++)
        printf("%-16s %-4s %-12s %-5s %s%s\n", rows[i].name, rows[i].kind, kiln_availability_str(rows[i].availability),
               rows[i].used ? "yes" : "", rows[i].detail, rows[i].supported ? "" : " [no kiln kernels]");
    return 0;
}
