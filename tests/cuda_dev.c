/* The kernels of src/backend/cuda on a GPU (test_cuda_gpu): the driver API
 * loaded with dlopen, the library's embedded fatbin, one synchronous launch
 * per call with the shapes the emulator build (cuda_emu.cpp) uses.  Each
 * call uploads its buffers (whole strides, see cuda_run.h), launches, waits
 * and downloads what the kernel writes; a driver error ends the test with
 * its message.  See cuda_run.h. */
#include "cuda_run.h"
#include "backend/cuda/shapes.h"
#include "backend/cuda_kernels.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cu_result;
typedef unsigned long long cu_ptr;

static struct {
    cu_result (*init)(unsigned);
    cu_result (*device_get)(int *, int);
    cu_result (*device_name)(char *, int, int);
    cu_result (*primary_retain)(void **, int);
    cu_result (*ctx_set)(void *);
    cu_result (*module_load)(void **, const void *);
    cu_result (*get_function)(void **, void *, const char *);
    cu_result (*mem_alloc)(cu_ptr *, size_t);
    cu_result (*mem_free)(cu_ptr);
    cu_result (*htod)(cu_ptr, const void *, size_t);
    cu_result (*dtoh)(void *, cu_ptr, size_t);
    cu_result (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                        void **);
    cu_result (*sync)(void);
    cu_result (*error_string)(cu_result, const char **);
    void *module;
    char name[256];
} cu;

static void check(cu_result r, const char *what) {
    if (r == 0) return;
    const char *s = NULL;
    if (cu.error_string) cu.error_string(r, &s);
    fprintf(stderr, "test_cuda_gpu: %s failed: error %d (%s)\n", what, r, s ? s : "?");
    exit(1);
}

int cr_init(char *why, size_t cap) {
    size_t fb_size;
    const void *fb = backend_cuda_fatbin(&fb_size);
    if (!fb) {
        snprintf(why, cap, "this build has no CUDA kernels (no nvcc, or KILN_CUDA=OFF)");
        return -1;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, cap, "no CUDA driver (libcuda.so.1)");
        return -1;
    }
    const struct {
        void **fn;
        const char *name;
    } syms[] = {{(void **)&cu.init, "cuInit"},
                {(void **)&cu.device_get, "cuDeviceGet"},
                {(void **)&cu.device_name, "cuDeviceGetName"},
                {(void **)&cu.primary_retain, "cuDevicePrimaryCtxRetain"},
                {(void **)&cu.ctx_set, "cuCtxSetCurrent"},
                {(void **)&cu.module_load, "cuModuleLoadData"},
                {(void **)&cu.get_function, "cuModuleGetFunction"},
                {(void **)&cu.mem_alloc, "cuMemAlloc_v2"},
                {(void **)&cu.mem_free, "cuMemFree_v2"},
                {(void **)&cu.htod, "cuMemcpyHtoD_v2"},
                {(void **)&cu.dtoh, "cuMemcpyDtoH_v2"},
                {(void **)&cu.launch, "cuLaunchKernel"},
                {(void **)&cu.sync, "cuCtxSynchronize"},
                {(void **)&cu.error_string, "cuGetErrorString"}};
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(why, cap, "the CUDA driver lacks %s", syms[i].name);
            return -1;
        }
    }
    cu_result r = cu.init(0);
    int dev = 0;
    if (r == 0) r = cu.device_get(&dev, 0);
    if (r != 0) {
        snprintf(why, cap, "cuInit or cuDeviceGet failed (error %d): no usable GPU", r);
        return -1;
    }
    void *ctx;
    check(cu.device_name(cu.name, (int)sizeof(cu.name), dev), "cuDeviceGetName");
    check(cu.primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cu.ctx_set(ctx), "cuCtxSetCurrent");
    check(cu.module_load(&cu.module, fb), "cuModuleLoadData (the embedded fatbin)");
    return 0;
}

const char *cr_device(void) { return cu.name; }

/* device copy of n bytes at p (p NULL: uninitialized) */
static cu_ptr up(const void *p, size_t n) {
    cu_ptr d;
    check(cu.mem_alloc(&d, n ? n : 1), "cuMemAlloc");
    if (p && n) check(cu.htod(d, p, n), "cuMemcpyHtoD");
    return d;
}

static void down(void *p, cu_ptr d, size_t n) {
    check(cu.dtoh(p, d, n), "cuMemcpyDtoH");
    check(cu.mem_free(d), "cuMemFree");
}

static void drop(cu_ptr d) { check(cu.mem_free(d), "cuMemFree"); }

static void run(const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **args) {
    void *f;
    check(cu.get_function(&f, cu.module, kernel), kernel);
    check(cu.launch(f, gx, gy, gz, bx, 1, 1, 0, NULL, args, NULL), kernel);
    check(cu.sync(), kernel);
}

static unsigned ceil_div(int64_t a, int b) { return (unsigned)((a + b - 1) / b); }

/* the kernel name for a type, "prefix_q4_k" etc.; NULL when none */
static const char *typed(const char *prefix, int type, char *buf, size_t cap) {
    const char *s;
    switch (type) {
    case 0: s = "f32"; break;
    case 1: s = "f16"; break;
    case 30: s = "bf16"; break;
    case 2: s = "q4_0"; break;
    case 8: s = "q8_0"; break;
    case 12: s = "q4_k"; break;
    case 13: s = "q5_k"; break;
    case 14: s = "q6_k"; break;
    case 3: s = "q4_1"; break;
    case 6: s = "q5_0"; break;
    case 7: s = "q5_1"; break;
    case 10: s = "q2_k"; break;
    case 11: s = "q3_k"; break;
    case 20: s = "iq4_nl"; break;
    case 23: s = "iq4_xs"; break;
    default: return NULL;
    }
    snprintf(buf, cap, "%s_%s", prefix, s);
    return buf;
}

int cr_matvec(int type, const void *w, int64_t w_stride, const float *x, int64_t x_stride, float *y, int64_t y_stride,
              int n_rows, int n, int n_vec) {
    char name[64];
    if (!typed("kcu_matvec", type, name, sizeof name)) return -1;
    cu_ptr dw = up(w, (size_t)n_rows * w_stride), dx = up(x, sizeof(float) * n_vec * x_stride);
    cu_ptr dy = up(y, sizeof(float) * n_vec * y_stride);
    void *args[] = {&dw, &w_stride, &dx, &x_stride, &dy, &y_stride, &n_rows, &n, &n_vec};
    run(name, ceil_div(n_rows, KCU_MV_WARPS), 1, 1, 32 * KCU_MV_WARPS, args);
    down(y, dy, sizeof(float) * n_vec * y_stride);
    drop(dw);
    drop(dx);
    return 0;
}

int cr_gemm(int type, const float *x, int64_t x_stride, const void *w, int64_t w_stride, float *y, int64_t y_stride,
            int m, int n, int k) {
    char name[64];
    if (!typed("kcu_gemm", type, name, sizeof name)) return -1;
    cu_ptr dx = up(x, sizeof(float) * m * x_stride), dw = up(w, (size_t)n * w_stride);
    cu_ptr dy = up(y, sizeof(float) * m * y_stride);
    void *args[] = {&dx, &x_stride, &dw, &w_stride, &dy, &y_stride, &m, &n, &k};
    run(name, ceil_div(n, KCU_GM_BN), ceil_div(m, KCU_GM_BM), 1, KCU_GM_THREADS, args);
    down(y, dy, sizeof(float) * m * y_stride);
    drop(dx);
    drop(dw);
    return 0;
}

int cr_get_rows(int type, const void *w, int64_t w_stride, const int32_t *ids, int n_ids, float *out,
                int64_t out_stride, int n) {
    char name[64];
    if (!typed("kcu_get_rows", type, name, sizeof name)) return -1;
    int rows = 0;
    for (int i = 0; i < n_ids; i++) rows = ids[i] + 1 > rows ? ids[i] + 1 : rows;
    cu_ptr dw = up(w, (size_t)rows * w_stride), di = up(ids, sizeof(int32_t) * n_ids);
    cu_ptr dout = up(out, sizeof(float) * n_ids * out_stride);
    void *args[] = {&dw, &w_stride, &di, &dout, &out_stride, &n};
    run(name, (unsigned)n_ids, 1, 1, 64, args);
    down(out, dout, sizeof(float) * n_ids * out_stride);
    drop(dw);
    drop(di);
    return 0;
}

void cr_rmsnorm(const float *x, int64_t x_stride, const float *w, float *out, int64_t out_stride, int rows, int n,
                float eps, int threads) {
    cu_ptr dx = up(x, sizeof(float) * rows * x_stride), dw = w ? up(w, sizeof(float) * n) : 0;
    cu_ptr dout = out == x ? dx : up(out, sizeof(float) * rows * out_stride);
    void *args[] = {&dx, &x_stride, &dw, &dout, &out_stride, &n, &eps};
    run("kcu_rmsnorm", (unsigned)rows, 1, 1, (unsigned)threads, args);
    down(out, dout, sizeof(float) * rows * out_stride);
    if (dout != dx) drop(dx);
    if (w) drop(dw);
}

void cr_rope(float *x, int64_t tok_stride, int n_tok, int n_head, int head_dim, int n_rot, int neox, const int32_t *pos,
             const float *inv_freq, float mscale) {
    cu_ptr dx = up(x, sizeof(float) * n_tok * tok_stride), dp = up(pos, sizeof(int32_t) * n_tok);
    cu_ptr df = up(inv_freq, sizeof(float) * (n_rot / 2));
    void *args[] = {&dx, &tok_stride, &head_dim, &n_rot, &neox, &dp, &df, &mscale};
    run("kcu_rope", (unsigned)n_tok, (unsigned)n_head, 1, 64, args);
    down(x, dx, sizeof(float) * n_tok * tok_stride);
    drop(dp);
    drop(df);
}

void cr_swiglu(float *g, const float *u, int64_t n) {
    cu_ptr dg = up(g, sizeof(float) * n), du = up(u, sizeof(float) * n);
    void *args[] = {&dg, &du, &n};
    run("kcu_swiglu", 3, 1, 1, 64, args);
    down(g, dg, sizeof(float) * n);
    drop(du);
}

void cr_add(float *y, const float *x, int64_t n) {
    cu_ptr dy = up(y, sizeof(float) * n), dx = up(x, sizeof(float) * n);
    void *args[] = {&dy, &dx, &n};
    run("kcu_add", 2, 1, 1, 96, args);
    down(y, dy, sizeof(float) * n);
    drop(dx);
}

void cr_argmax(const float *x, int64_t x_stride, int rows, int n, int32_t *out, int threads) {
    cu_ptr dx = up(x, sizeof(float) * rows * x_stride), dout = up(NULL, sizeof(int32_t) * rows);
    void *args[] = {&dx, &x_stride, &n, &dout};
    run("kcu_argmax", (unsigned)rows, 1, 1, (unsigned)threads, args);
    down(out, dout, sizeof(int32_t) * rows);
    drop(dx);
}

void cr_kv_write(const float *src, int64_t src_stride, int n_tok, uint16_t *cache, int64_t cell_stride, int64_t offset,
                 const int32_t *cell, int n) {
    int cells = 0;
    for (int i = 0; i < n_tok; i++) cells = cell[i] + 1 > cells ? cell[i] + 1 : cells;
    cu_ptr ds = up(src, sizeof(float) * n_tok * src_stride), dc = up(cache, 2 * (size_t)cells * cell_stride);
    cu_ptr dcell = up(cell, sizeof(int32_t) * n_tok);
    void *args[] = {&ds, &src_stride, &dc, &cell_stride, &offset, &dcell, &n};
    run("kcu_kv_write", (unsigned)n_tok, 1, 1, 64, args);
    down(cache, dc, 2 * (size_t)cells * cell_stride);
    drop(ds);
    drop(dcell);
}

/* cells a set of block tables reaches: 16 past the largest block id used */
static size_t cells_used(const int32_t *tables, int n_tables, int table_stride, const int *n_pos) {
    int top = 0;
    for (int s = 0; s < n_tables; s++)
        for (int b = 0; b * KCU_KV_BLOCK < n_pos[s]; b++)
            top = tables[s * table_stride + b] + 1 > top ? tables[s * table_stride + b] + 1 : top;
    return (size_t)top * KCU_KV_BLOCK;
}

void cr_attn_decode(const float *q, int64_t q_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                    const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head, int n_kv_head,
                    int hd, float scale, int split_len, int n_split, int window, const float *sinks, float *out,
                    int64_t out_stride) {
    const size_t cache = 2 * cells_used(tables, n_seq, table_stride, n_kv) * cell_stride;
    cu_ptr dq = up(q, sizeof(float) * n_seq * q_stride), dk = up(k, cache), dv = up(v, cache);
    cu_ptr dt = up(tables, sizeof(int32_t) * n_seq * table_stride), dn = up(n_kv, sizeof(int32_t) * n_seq);
    cu_ptr dpart = up(NULL, sizeof(float) * n_seq * n_head * n_split * (hd + 2));
    cu_ptr dout = up(out, sizeof(float) * n_seq * out_stride);
    cu_ptr dsink = sinks ? up(sinks, sizeof(float) * n_head) : 0;
    void *a1[] = {&dq,     &q_stride,  &dk, &dv,    &cell_stride, &dt,     &table_stride, &dn,
                  &n_head, &n_kv_head, &hd, &scale, &split_len,   &window, &dpart};
    run("kcu_attn_decode", (unsigned)n_head, (unsigned)n_split, (unsigned)n_seq, 32 * KCU_ATT_WARPS, a1);
    void *a2[] = {&dpart, &n_split, &n_head, &hd, &dsink, &dout, &out_stride};
    run("kcu_attn_combine", (unsigned)n_head, (unsigned)n_seq, 1, 64, a2);
    if (dsink) drop(dsink);
    down(out, dout, sizeof(float) * n_seq * out_stride);
    drop(dq);
    drop(dk);
    drop(dv);
    drop(dt);
    drop(dn);
    drop(dpart);
}

void cr_attn_prefill(const float *q, int64_t tok_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                     const int32_t *table, int n_past, int n_tok, int n_head, int n_kv_head, int hd, float scale,
                     float *out) {
    const int n_pos = n_past + n_tok;
    const size_t cache = 2 * cells_used(table, 1, 0, &n_pos) * cell_stride;
    const int n_blocks = (n_pos + KCU_KV_BLOCK - 1) / KCU_KV_BLOCK;
    cu_ptr dq = up(q, sizeof(float) * n_tok * tok_stride), dk = up(k, cache), dv = up(v, cache);
    cu_ptr dt = up(table, sizeof(int32_t) * n_blocks), dout = up(out, sizeof(float) * n_tok * tok_stride);
    void *args[] = {&dq,    &tok_stride, &dk,        &dv, &cell_stride, &dt,  &n_past,
                    &n_tok, &n_head,     &n_kv_head, &hd, &scale,       &dout};
    run("kcu_attn_prefill", ceil_div(n_tok, KCU_ATT_WARPS), (unsigned)n_head, 1, 32 * KCU_ATT_WARPS, args);
    down(out, dout, sizeof(float) * n_tok * tok_stride);
    drop(dq);
    drop(dk);
    drop(dv);
    drop(dt);
}

void cr_gdn_gates(const float *ba, const float *dt_bias, const float *ssm_a, float *beta, float *gd, int n, int Hv,
                  int Hk, int grouped) {
    cu_ptr dba = up(ba, sizeof(float) * n * 2 * Hv), ddt = up(dt_bias, sizeof(float) * Hv);
    cu_ptr da = up(ssm_a, sizeof(float) * Hv), dbeta = up(NULL, sizeof(float) * n * Hv);
    cu_ptr dgd = up(NULL, sizeof(float) * n * Hv);
    void *args[] = {&dba, &ddt, &da, &dbeta, &dgd, &n, &Hv, &Hk, &grouped};
    run("kcu_gdn_gates", 2, 1, 1, 64, args);
    down(beta, dbeta, sizeof(float) * n * Hv);
    down(gd, dgd, sizeof(float) * n * Hv);
    drop(dba);
    drop(ddt);
    drop(da);
}

void cr_conv_silu(const float *x, int64_t ldx, const float *w, float *state, float *y, int n, int C, int K) {
    cu_ptr dx = up(x, sizeof(float) * n * ldx), dw = up(w, sizeof(float) * K * C);
    cu_ptr ds = up(state, sizeof(float) * (K - 1) * C), dy = up(NULL, sizeof(float) * n * C);
    void *args[] = {&dx, &ldx, &dw, &ds, &dy, &n, &C, &K};
    run("kcu_conv_silu", ceil_div(C, 64), 1, 1, 64, args);
    down(state, ds, sizeof(float) * (K - 1) * C);
    down(y, dy, sizeof(float) * n * C);
    drop(dx);
    drop(dw);
}

void cr_l2norm(float *x, int64_t tok_stride, int n_tok, int rows, int n, float eps) {
    cu_ptr dx = up(x, sizeof(float) * n_tok * tok_stride);
    void *args[] = {&dx, &tok_stride, &n, &eps};
    run("kcu_l2norm", (unsigned)n_tok, (unsigned)rows, 1, 64, args);
    down(x, dx, sizeof(float) * n_tok * tok_stride);
}

void cr_rmsnorm_gated(float *o, const float *z, const float *w, int rows, int n, float eps) {
    cu_ptr dout = up(o, sizeof(float) * rows * n), dz = up(z, sizeof(float) * rows * n), dw = up(w, sizeof(float) * n);
    void *args[] = {&dout, &dz, &dw, &n, &eps};
    run("kcu_rmsnorm_gated", (unsigned)rows, 1, 1, 64, args);
    down(o, dout, sizeof(float) * rows * n);
    drop(dz);
    drop(dw);
}

void cr_gdn_rec(const float *qkv, int64_t ld, const float *g, const float *beta, int64_t ld_gb, float *state, float *o,
                int n, int Hk, int Hv, int dk, int dv, int grouped, float scale) {
    cu_ptr dq = up(qkv, sizeof(float) * n * ld), dv_ = dq + sizeof(float) * 2 * Hk * dk;
    cu_ptr dg = up(g, sizeof(float) * n * ld_gb), db = up(beta, sizeof(float) * n * ld_gb);
    cu_ptr ds = up(state, sizeof(float) * Hv * dv * dk), dout = o ? up(NULL, sizeof(float) * n * Hv * dv) : 0;
    int64_t ld_o = (int64_t)Hv * dv;
    void *args[] = {&dq, &ld, &dv_, &ld, &dg, &db, &ld_gb, &ds, &dout, &ld_o, &n, &Hk, &Hv, &dk, &dv, &grouped, &scale};
    run("kcu_gdn_rec", ceil_div(dv, KCU_GDN_WARPS), (unsigned)Hv, 1, 32 * KCU_GDN_WARPS, args);
    down(state, ds, sizeof(float) * Hv * dv * dk);
    if (o) down(o, dout, sizeof(float) * n * Hv * dv);
    drop(dq);
    drop(dg);
    drop(db);
}

void cr_attn_gate(float *att, const float *qg, int n, int n_head, int hd) {
    cu_ptr da = up(att, sizeof(float) * n * n_head * hd), dq = up(qg, sizeof(float) * n * 2 * n_head * hd);
    void *args[] = {&da, &dq, &n, &n_head, &hd};
    run("kcu_attn_gate", 3, 1, 1, 64, args);
    down(att, da, sizeof(float) * n * n_head * hd);
    drop(dq);
}

void cr_moe_route(float *logits, int32_t *ids, float *w, int n, int n_expert, int k, int mode, int norm, float scale,
                  int sig, const float *bias, int n_group, int n_group_used) {
    cu_ptr dl = up(logits, sizeof(float) * n * n_expert), ds = up(NULL, sizeof(float) * n * n_expert);
    cu_ptr di = up(NULL, sizeof(int32_t) * n * k), dw = up(NULL, sizeof(float) * n * k);
    cu_ptr db = bias ? up(bias, sizeof(float) * n_expert) : 0;
    void *args[] = {&dl, &ds, &di, &dw, &n, &n_expert, &k, &mode, &norm, &scale, &sig, &db, &n_group, &n_group_used};
    run("kcu_moe_route", ceil_div(n, 32), 1, 1, 32, args);
    down(logits, dl, sizeof(float) * n * n_expert);
    down(ids, di, sizeof(int32_t) * n * k);
    down(w, dw, sizeof(float) * n * k);
    drop(ds);
    if (db) drop(db);
}

void cr_gather_rows(float *dst, const float *src, int src_rows, int64_t src_stride, const int32_t *idx, int rows,
                    int n) {
    cu_ptr dd = up(NULL, sizeof(float) * rows * n), ds = up(src, sizeof(float) * src_rows * src_stride);
    cu_ptr di = up(idx, sizeof(int32_t) * rows);
    void *args[] = {&dd, &ds, &src_stride, &di, &n};
    run("kcu_gather_rows", (unsigned)rows, 1, 1, 64, args);
    down(dst, dd, sizeof(float) * rows * n);
    drop(ds);
    drop(di);
}

void cr_add_rows(float *y, const float *b, int rows, int n) {
    cu_ptr dy = up(y, sizeof(float) * rows * n), db = up(b, sizeof(float) * n);
    void *args[] = {&dy, &db, &rows, &n};
    run("kcu_add_rows", 2, 1, 1, 96, args);
    down(y, dy, sizeof(float) * rows * n);
    drop(db);
}

void cr_moe_combine(const float *md, int md_rows, const int32_t *row_of, const float *w, int k, const float *sgl,
                    int shared, float *y, int T, int n) {
    cu_ptr dm = up(md, sizeof(float) * md_rows * n), dr = up(row_of, sizeof(int32_t) * T * k);
    cu_ptr dw = up(w, sizeof(float) * T * k), dsg = sgl ? up(sgl, sizeof(float) * T) : 0;
    cu_ptr dy = up(y, sizeof(float) * T * n);
    void *args[] = {&dm, &dr, &dw, &k, &dsg, &shared, &dy, &n};
    run("kcu_moe_combine", ceil_div(n, 64), (unsigned)T, 1, 64, args);
    down(y, dy, sizeof(float) * T * n);
    drop(dm);
    drop(dr);
    drop(dw);
    if (dsg) drop(dsg);
}

void cr_swiglu_oai(float *g, const float *u, int64_t n, float alpha, float limit) {
    cu_ptr dg = up(g, sizeof(float) * n), du = up(u, sizeof(float) * n);
    void *args[] = {&dg, &du, &n, &alpha, &limit};
    run("kcu_swiglu_oai", 3, 1, 1, 64, args);
    down(g, dg, sizeof(float) * n);
    drop(du);
}

void cr_relu_sq(float *x, int64_t n) {
    cu_ptr dx = up(x, sizeof(float) * n);
    void *args[] = {&dx, &n};
    run("kcu_relu_sq", 3, 1, 1, 64, args);
    down(x, dx, sizeof(float) * n);
}

void cr_gelu(float *x, int64_t n) {
    cu_ptr dx = up(x, sizeof(float) * n);
    void *args[] = {&dx, &n};
    run("kcu_gelu", 3, 1, 1, 64, args);
    down(x, dx, sizeof(float) * n);
}

void cr_kv_write_q8(const float *src, int64_t src_stride, int n_tok, uint8_t *cache, int64_t cell_stride,
                    int64_t offset, const int32_t *cell, int n) {
    int cells = 0;
    for (int i = 0; i < n_tok; i++) cells = cell[i] + 1 > cells ? cell[i] + 1 : cells;
    cu_ptr ds = up(src, sizeof(float) * n_tok * src_stride), dc = up(cache, (size_t)cells * cell_stride);
    cu_ptr dcell = up(cell, sizeof(int32_t) * n_tok);
    void *args[] = {&ds, &src_stride, &dc, &cell_stride, &offset, &dcell, &n};
    run("kcu_kv_write_q8", (unsigned)n_tok, 1, 1, 64, args);
    down(cache, dc, (size_t)cells * cell_stride);
    drop(ds);
    drop(dcell);
}

void cr_attn_decode_q8(const float *q, int64_t q_stride, const uint8_t *k, const uint8_t *v, int64_t cell_stride,
                       const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head,
                       int n_kv_head, int hd, float scale, int split_len, int n_split, int window, const float *sinks,
                       float *out, int64_t out_stride) {
    const size_t cache = cells_used(tables, n_seq, table_stride, n_kv) * cell_stride;
    cu_ptr dq = up(q, sizeof(float) * n_seq * q_stride), dk = up(k, cache), dv = up(v, cache);
    cu_ptr dt = up(tables, sizeof(int32_t) * n_seq * table_stride), dn = up(n_kv, sizeof(int32_t) * n_seq);
    cu_ptr dpart = up(NULL, sizeof(float) * n_seq * n_head * n_split * (hd + 2));
    cu_ptr dout = up(out, sizeof(float) * n_seq * out_stride);
    cu_ptr dsink = sinks ? up(sinks, sizeof(float) * n_head) : 0;
    void *a1[] = {&dq,     &q_stride,  &dk, &dv,    &cell_stride, &dt,     &table_stride, &dn,
                  &n_head, &n_kv_head, &hd, &scale, &split_len,   &window, &dpart};
    run("kcu_attn_decode_q8", (unsigned)n_head, (unsigned)n_split, (unsigned)n_seq, 32 * KCU_ATT_WARPS, a1);
    void *a2[] = {&dpart, &n_split, &n_head, &hd, &dsink, &dout, &out_stride};
    run("kcu_attn_combine", (unsigned)n_head, (unsigned)n_seq, 1, 64, a2);
    if (dsink) drop(dsink);
    down(out, dout, sizeof(float) * n_seq * out_stride);
    drop(dq);
    drop(dk);
    drop(dv);
    drop(dt);
    drop(dn);
    drop(dpart);
}
