/* kiln_backend_probe: the CPU rows agree with what the kernel says the CPU
 * can run (/proc/cpuinfo lists a feature only once its state is enabled),
 * the decision rules hold for machines this test is not on (a VM that
 * advertises AMX or AVX-512 without enabling it), KILN_ISA caps the row in
 * use, and the GPU rows are well-formed whatever this machine has. */
#define _GNU_SOURCE
#include "backend/probe.h"
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kiln_backend_status *find(const kiln_backend_status *rows, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    return NULL;
}

static int is_avail(const kiln_backend_status *rows, int n, const char *name) {
    const kiln_backend_status *r = find(rows, n, name);
    return r && r->availability == KILN_AVAILABILITY_AVAILABLE;
}

#if defined(__x86_64__)
/* The "flags" line of /proc/cpuinfo, padded with spaces for word search. */
static char *cpu_flags(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    char *line = NULL, *out = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (strncmp(line, "flags", 5)) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        line[strcspn(line, "\n")] = 0;
        if (asprintf(&out, " %s ", c + 1) < 0) out = NULL;
        break;
    }
    free(line);
    fclose(f);
    return out;
}

static int has(const char *flags, const char *w) {
    char k[64];
    snprintf(k, sizeof k, " %s ", w);
    return strstr(flags, k) != NULL;
}

static void this_machine(void) {
    kiln_backend_status rows[16];
    int n = kiln_backend_probe(rows, 16);
    CHECK(n >= 8 && n <= 16);
    CHECK(kiln_backend_probe(NULL, 0) == n);
    const char *names[] = {"cpu",     "cpu-avx2", "cpu-avx512", "cpu-avx512-vnni", "cpu-avx512-bf16",
                           "cpu-amx", "cuda",     "vulkan"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECKF(find(rows, n, names[i]), "%s", names[i]);
    for (int i = 0; i < n; i++) {
        CHECK(rows[i].detail[0]);
        CHECK(!strcmp(rows[i].kind, "cpu") || !strcmp(rows[i].kind, "gpu"));
        if (!strcmp(rows[i].kind, "gpu")) CHECK(!rows[i].supported && !rows[i].used);
        if (rows[i].used) CHECKF(rows[i].availability == KILN_AVAILABILITY_AVAILABLE, "%s used", rows[i].name);
    }
    CHECK(is_avail(rows, n, "cpu") && find(rows, n, "cpu")->supported);
    /* exactly one dispatch level is in use, and it is the one kiln names */
    int used = find(rows, n, "cpu")->used + find(rows, n, "cpu-avx2")->used + find(rows, n, "cpu-avx512-vnni")->used;
    CHECK(used == 1);
    const char *path = kiln_cpu_path();
    if (find(rows, n, "cpu-avx512-vnni")->used) CHECK(!strncmp(path, "avx512", 6));
    if (find(rows, n, "cpu-avx2")->used) CHECK(!strcmp(path, "avx2"));
    if (find(rows, n, "cpu")->used) CHECK(!strcmp(path, "scalar"));

    char *fl = cpu_flags();
    CHECK(fl != NULL);
    if (!fl) return;
    CHECK(is_avail(rows, n, "cpu-avx2") == (has(fl, "avx2") && has(fl, "fma") && has(fl, "f16c") && has(fl, "bmi2")));
    int f512 = has(fl, "avx512f") && has(fl, "avx512dq") && has(fl, "avx512bw") && has(fl, "avx512vl");
    CHECK(is_avail(rows, n, "cpu-avx512") == f512);
    CHECK(is_avail(rows, n, "cpu-avx512-vnni") == (f512 && has(fl, "avx512_vnni")));
    CHECK(is_avail(rows, n, "cpu-avx512-bf16") == (f512 && has(fl, "avx512_vnni") && has(fl, "avx512_bf16")));
    if (is_avail(rows, n, "cpu-amx")) CHECK(has(fl, "amx_tile"));
    printf("this machine: %s; avx2 %d avx512 %d vnni %d bf16 %d amx %d\n", path, is_avail(rows, n, "cpu-avx2"), f512,
           is_avail(rows, n, "cpu-avx512-vnni"), is_avail(rows, n, "cpu-avx512-bf16"), is_avail(rows, n, "cpu-amx"));
    free(fl);
}

static quant_cpu avx2_cpu(void) {
    quant_cpu c;
    memset(&c, 0, sizeof c);
    c.avx = c.avx2 = c.fma = c.f16c = c.bmi2 = 1;
    c.os_ymm = 1;
    return c;
}

static void rules(void) {
    kiln_backend_status rows[16];
    /* a VM that advertises AVX-512 (VNNI, BF16) and AMX but enables neither state */
    quant_cpu c = avx2_cpu();
    c.avx512f = c.avx512dq = c.avx512bw = c.avx512vl = c.avx512vnni = c.avx512bf16 = 1;
    c.amx_tile = c.amx_int8 = c.amx_bf16 = 1;
    int n = backend_cpu_rows(&c, QUANT_ISA_AVX2, QUANT_ISA_AVX2, rows, 16);
    CHECK(n == 6);
    CHECK(is_avail(rows, n, "cpu-avx2") && find(rows, n, "cpu-avx2")->used);
    CHECK(!is_avail(rows, n, "cpu-avx512") && strstr(find(rows, n, "cpu-avx512")->detail, "ZMM"));
    CHECK(!is_avail(rows, n, "cpu-avx512-vnni") && !is_avail(rows, n, "cpu-avx512-bf16"));
    CHECK(!is_avail(rows, n, "cpu-amx") && strstr(find(rows, n, "cpu-amx")->detail, "trap"));
    /* the OS enables ZMM but not the tiles: AVX-512 runs, AMX does not */
    c.os_zmm = 1;
    n = backend_cpu_rows(&c, QUANT_ISA_AVX512, QUANT_ISA_AVX512, rows, 16);
    CHECK(is_avail(rows, n, "cpu-avx512-vnni") && find(rows, n, "cpu-avx512-vnni")->used);
    CHECK(is_avail(rows, n, "cpu-avx512-bf16") && find(rows, n, "cpu-avx512-bf16")->used);
    CHECK(!find(rows, n, "cpu-avx2")->used);
    CHECK(!is_avail(rows, n, "cpu-amx"));
    /* tiles enabled in XCR0 but the kernel would not grant them */
    c.os_amx = 1;
    n = backend_cpu_rows(&c, QUANT_ISA_AVX512, QUANT_ISA_AVX512, rows, 16);
    CHECK(!is_avail(rows, n, "cpu-amx") && strstr(find(rows, n, "cpu-amx")->detail, "kernel"));
    c.kernel_amx = 1;
    n = backend_cpu_rows(&c, QUANT_ISA_AVX512, QUANT_ISA_AVX512, rows, 16);
    CHECK(is_avail(rows, n, "cpu-amx") && !find(rows, n, "cpu-amx")->used && !find(rows, n, "cpu-amx")->supported);
    /* AVX-512 without VNNI: kiln's AVX-512 level is out of reach */
    c.avx512vnni = 0;
    n = backend_cpu_rows(&c, QUANT_ISA_AVX2, QUANT_ISA_AVX2, rows, 16);
    CHECK(is_avail(rows, n, "cpu-avx512") && !is_avail(rows, n, "cpu-avx512-vnni"));
    CHECK(!is_avail(rows, n, "cpu-avx512-bf16") && find(rows, n, "cpu-avx2")->used);
    /* capped by KILN_ISA below what the CPU has */
    c.avx512vnni = 1;
    n = backend_cpu_rows(&c, QUANT_ISA_SCALAR, QUANT_ISA_AVX512, rows, 16);
    CHECK(find(rows, n, "cpu")->used && !find(rows, n, "cpu-avx512-vnni")->used);
    CHECK(strstr(find(rows, n, "cpu")->detail, "KILN_ISA") != NULL);
    /* no AVX2 state at all (an old CPU, or an OS without XSAVE) */
    quant_cpu old = avx2_cpu();
    old.os_ymm = 0;
    n = backend_cpu_rows(&old, QUANT_ISA_SCALAR, QUANT_ISA_SCALAR, rows, 16);
    CHECK(!is_avail(rows, n, "cpu-avx2") && strstr(find(rows, n, "cpu-avx2")->detail, "YMM"));
    CHECK(find(rows, n, "cpu")->used);
}

#else
/* aarch64 (or another build): the rows are well-formed and the level row in
 * use is the level kiln names (cpu-i8mm and cpu-bf16 are "used" beside the
 * dotprod row: kernels that level adds). */
static void this_machine(void) {
    kiln_backend_status rows[16];
    int n = kiln_backend_probe(rows, 16);
    CHECK(n >= 3 && n <= 16 && kiln_backend_probe(NULL, 0) == n);
    CHECK(is_avail(rows, n, "cpu") && find(rows, n, "cpu")->supported);
    int used = 0;
    for (int i = 0; i < n; i++) {
        CHECK(rows[i].detail[0]);
        if (rows[i].used) CHECKF(rows[i].availability == KILN_AVAILABILITY_AVAILABLE, "%s used", rows[i].name);
        if (rows[i].used && strcmp(rows[i].name, "cpu-i8mm") && strcmp(rows[i].name, "cpu-bf16")) {
            used++;
            const char *want = !strcmp(rows[i].name, "cpu") ? "scalar" : rows[i].name + 4;
            CHECKF(!strcmp(kiln_cpu_path(), want), "%s used, path %s", rows[i].name, kiln_cpu_path());
        }
    }
    CHECK(used == 1);
    printf("this machine: %s\n", kiln_cpu_path());
}

static void rules(void) {}
#endif

/* The aarch64 rows, on any build: levels by the OS's report, "unknown"
 * where the OS was not asked, KILN_ISA's cap named. */
static void arm_rules(void) {
    kiln_backend_status rows[16];
    quant_cpu c;
    memset(&c, 0, sizeof c);
    c.asimd = c.arm_known = 1;
    int n = backend_cpu_rows_aarch64(&c, QUANT_ISA_NEON, QUANT_ISA_NEON, rows, 16);
    CHECK(n == 7);
    CHECK(is_avail(rows, n, "cpu-neon") && find(rows, n, "cpu-neon")->used);
    CHECK(find(rows, n, "cpu-dotprod")->availability == KILN_AVAILABILITY_UNAVAILABLE);
    c.dotprod = c.i8mm = 1;
    n = backend_cpu_rows_aarch64(&c, QUANT_ISA_DOTPROD, QUANT_ISA_DOTPROD, rows, 16);
    CHECK(is_avail(rows, n, "cpu-dotprod") && find(rows, n, "cpu-dotprod")->used && !find(rows, n, "cpu-neon")->used);
    CHECK(is_avail(rows, n, "cpu-i8mm") && find(rows, n, "cpu-i8mm")->supported && find(rows, n, "cpu-i8mm")->used);
    CHECK(!is_avail(rows, n, "cpu-bf16") && find(rows, n, "cpu-bf16")->supported && !find(rows, n, "cpu-bf16")->used);
    CHECK(!is_avail(rows, n, "cpu-sve") && !is_avail(rows, n, "cpu-fp16"));
    n = backend_cpu_rows_aarch64(&c, QUANT_ISA_SCALAR, QUANT_ISA_DOTPROD, rows, 16);
    CHECK(find(rows, n, "cpu")->used && strstr(find(rows, n, "cpu")->detail, "KILN_ISA") != NULL);
    c.arm_known = 0; /* neither Linux nor macOS: only Advanced SIMD is certain */
    n = backend_cpu_rows_aarch64(&c, QUANT_ISA_NEON, QUANT_ISA_NEON, rows, 16);
    CHECK(is_avail(rows, n, "cpu-neon"));
    CHECK(find(rows, n, "cpu-dotprod")->availability == KILN_AVAILABILITY_UNKNOWN);
    CHECK(find(rows, n, "cpu-i8mm")->availability == KILN_AVAILABILITY_UNKNOWN);
    CHECK(find(rows, n, "cpu-bf16")->availability == KILN_AVAILABILITY_UNKNOWN);
}

/* The CLI prints the same rows; KILN_ISA=scalar moves "used" to the scalar row. */
static void cli(void) {
    const char *bin = getenv("KILN_BIN");
    if (!bin) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "KILN_ISA=scalar '%s' backends --json", bin);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p) return;
    json_error_t e;
    json_t *j = json_loadf(p, 0, &e);
    CHECK(pclose(p) == 0);
    CHECK(json_is_array(j));
    int scalar_used = 0, others_used = 0;
    size_t i;
    json_t *o;
    json_array_foreach(j, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        int used = json_is_true(json_object_get(o, "used"));
        CHECK(name && json_string_value(json_object_get(o, "availability")));
        if (name && !strcmp(name, "cpu"))
            scalar_used = used;
        else
            others_used += used;
    }
    CHECK(json_array_size(j) >= 8);
    CHECK(scalar_used == 1 && others_used == 0);
    json_decref(j);
}

int main(void) {
    this_machine();
    rules();
    arm_rules();
    cli();
    return t_done();
}
