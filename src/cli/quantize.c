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
        else {
            fprintf(stderr, "kiln quantize: unexpected '%s'\n", argv[i]);
            return 2;
        }
    }
    if (np != 3) {
        fprintf(stderr, "usage: kiln quantize IN.gguf OUT.gguf TYPE [-t N]\n"
                        "types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m q4_k_s q5_k_m q3_k_m iq4_nl iq4_xs\n");
        return 2;
    }
    if (kiln_quantize(pos[0], pos[1], pos[2], threads) != KILN_OK) return cli_fail(NULL);
    return 0;
}
