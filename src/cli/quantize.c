/* kiln quantize IN OUT TYPE */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_quantize(int argc, char **argv) {
    int threads = 0;
    const char *pos[3];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (argv[i][0] != '-' && np < 3) pos[np++] = argv[i];
        else if (cli_help("quantize", argv[i])) return 0;
        else {
            fprintf(stderr, "kiln quantize: unexpected '%s'\n", argv[i]);
            return 2;
        }
    }
    if (np != 3) {
        cli_usage("quantize", stderr);
        return 2;
    }
    if (kiln_quantize(pos[0], pos[1], pos[2], threads) != KILN_OK) return cli_fail(NULL);
    return 0;
}
