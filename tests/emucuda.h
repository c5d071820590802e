/*
 * emucuda.h — the CUDA built-ins kiln's kernels use (src/backend/cuda/kcu.cuh),
 * emulated in C++ so the same .cu sources run on a CPU and are checked
 * against their scalar twins where there is no GPU (tests/test_cuda.c).
 *
 * A launch runs its blocks one after another.  The threads of a block are
 * fibers on the calling thread, run in rounds (each from a different
 * thread, see run_block); a thread runs until it waits at a barrier or
 * returns, so nothing here needs locks:
 *   - __syncthreads (kcu_sync) waits until every live thread of the block
 *     has arrived; a thread that returned no longer counts;
 *   - warps are 32 consecutive linear thread ids; a shuffle stores the
 *     value in the warp's scratch, waits for the warp, and reads the source
 *     lane's slot (two scratch buffers, alternating per warp operation, so a
 *     fast lane cannot overwrite a slot a slow lane has yet to read);
 *   - mma.sync m16n8k16 gathers the 32 lanes' fragments the same way and
 *     each lane computes its four outputs from the PTX ISA's fragment
 *     layout (see kcu_mma_16816), products of F16 values summed in F32 in
 *     k order;
 *   - __shared__ is `static`: one copy, valid because blocks run one at a
 *     time.
 * F16 conversions are exact round-to-nearest-even in software.
 *
 * What this checks is indexing, layouts and arithmetic, and a missing
 * __syncthreads shows as wrong results when the scheduling order exposes
 * it; data races within a warp, memory ordering and speed need the real
 * card (compute-sanitizer, ncu).
 */
#ifndef KILN_EMUCUDA_H
#define KILN_EMUCUDA_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>

/* On x86-64 a fiber switch is a few instructions of assembly
 * (kcu_emu_switch); elsewhere swapcontext, which also saves the signal mask
 * with a system call per switch.  This header goes into one translation
 * unit only (it defines kcu_emu_switch). */
#if defined(__x86_64__) && !defined(KCU_EMU_UCONTEXT)
#define KCU_EMU_ASM_SWITCH 1
#else
#define KCU_EMU_ASM_SWITCH 0
#endif

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace kcu_emu {

struct barrier {
    int arrived;
    unsigned gen;
};

struct fiber {
#if KCU_EMU_ASM_SWITCH
    void *sp; /* saved stack pointer while switched out */
#else
    ucontext_t ctx;
#endif
    dim3 tid;
    int lin, done;
    unsigned ops;        /* warp operations so far (picks the scratch buffer) */
    const barrier *wait; /* the barrier it waits at, or NULL */
    unsigned wait_gen;   /* ... until its generation moves past this */
};

enum { MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / 32, STACK = 256 * 1024 };

struct state {
    dim3 grid, block, bid;
    int n, alive;
    fiber *fibers;
    char *stacks;
    size_t stacks_cap;
    barrier block_bar;
    barrier warp_bar[MAX_WARPS];
    int warp_alive[MAX_WARPS];
    uint64_t shfl[MAX_WARPS][2][32];
    uint32_t mma[MAX_WARPS][2][32][6];
#if KCU_EMU_ASM_SWITCH
    void *sched_sp;
#else
    ucontext_t sched;
#endif
    fiber *cur;
    const std::function<void()> *body;
    uint64_t order; /* state of the scheduling order's generator */
};

inline state g;

#if KCU_EMU_ASM_SWITCH
/* kcu_emu_switch(from, to): pushes the callee-saved registers, stores the
 * stack pointer in *from, takes to as the stack pointer and pops the
 * registers saved there; returns into whatever that stack was doing.  A
 * plain function call for the compiler, so it saves everything else. */
extern "C" void kcu_emu_switch(void **from, void *to);
asm(".text\n"
    ".globl kcu_emu_switch\n"
    ".type kcu_emu_switch,@function\n"
    "kcu_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size kcu_emu_switch, .-kcu_emu_switch\n");
#endif

/* From the running fiber to the scheduler, and back. */
inline void to_scheduler(fiber *f) {
#if KCU_EMU_ASM_SWITCH
    kcu_emu_switch(&f->sp, g.sched_sp);
#else
    swapcontext(&f->ctx, &g.sched);
#endif
}

inline void to_fiber(fiber *f) {
#if KCU_EMU_ASM_SWITCH
    kcu_emu_switch(&g.sched_sp, f->sp);
#else
    swapcontext(&g.sched, &f->ctx);
#endif
}

[[noreturn]] inline void die(const char *what) {
    fprintf(stderr, "emucuda: %s (block %u,%u,%u)\n", what, g.bid.x, g.bid.y, g.bid.z);
    abort();
}

/* Arrive at b, which count live threads must reach; returns once they have. */
inline void wait_at(barrier *b, int count) {
    const unsigned gen = b->gen;
    if (++b->arrived >= count) {
        b->arrived = 0;
        b->gen++;
        return;
    }
    fiber *f = g.cur;
    f->wait = b;
    f->wait_gen = gen;
    to_scheduler(f);
}

/* A thread that returned lowers the counts; a barrier the others already
 * filled opens. */
inline void leave(fiber *f) {
    const int w = f->lin >> 5;
    g.alive--;
    g.warp_alive[w]--;
    barrier *bs[2] = {&g.block_bar, &g.warp_bar[w]};
    const int counts[2] = {g.alive, g.warp_alive[w]};
    for (int i = 0; i < 2; i++) {
        if (bs[i]->arrived > 0 && bs[i]->arrived >= counts[i]) {
            bs[i]->arrived = 0;
            bs[i]->gen++;
        }
    }
}

inline void entry() {
    (*g.body)();
    g.cur->done = 1;
#if KCU_EMU_ASM_SWITCH
    to_scheduler(g.cur); /* never resumed */
    die("a finished thread resumed");
#endif
}

inline void run_block() {
    const int n = g.n;
    for (int i = 0; i < n; i++) {
        fiber *f = &g.fibers[i];
        f->lin = i;
        f->tid = dim3(i % g.block.x, (i / g.block.x) % g.block.y, i / (g.block.x * g.block.y));
        f->done = 0;
        f->ops = 0;
        f->wait = NULL;
#if KCU_EMU_ASM_SWITCH
        /* a stack kcu_emu_switch returns from into entry: six zero
         * registers, then entry's address in a 16-byte aligned slot, so
         * entry starts with the stack aligned as after a call */
        uintptr_t top = (uintptr_t)(g.stacks + (size_t)(i + 1) * STACK) & ~(uintptr_t)15;
        void **sp = (void **)(top - 32);
        sp[0] = (void *)entry;
        sp -= 6;
        for (int r = 0; r < 6; r++) sp[r] = NULL;
        f->sp = sp;
#else
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = g.stacks + (size_t)i * STACK;
        f->ctx.uc_stack.ss_size = STACK;
        f->ctx.uc_link = &g.sched;
        makecontext(&f->ctx, entry, 0);
#endif
    }
    g.alive = n;
    g.block_bar = barrier{0, 0};
    for (int w = 0; w < MAX_WARPS; w++) {
        g.warp_bar[w] = barrier{0, 0};
        g.warp_alive[w] = w * 32 < n ? (n - w * 32 < 32 ? n - w * 32 : 32) : 0;
    }
    /* Each round visits the threads from a different start, forwards or
     * backwards (a fixed sequence, so runs repeat), so a kernel that reads
     * another thread's shared-memory write without a barrier between them
     * meets the write missing in some rounds rather than always in time. */
    while (g.alive > 0) {
        g.order = g.order * 6364136223846793005ull + 1442695040888963407ull;
        const int start = (int)((g.order >> 33) % (uint64_t)n), back = (int)((g.order >> 32) & 1);
        int ran = 0;
        for (int j = 0; j < n; j++) {
            const int i = back ? (start - j + n) % n : (start + j) % n;
            fiber *f = &g.fibers[i];
            if (f->done) continue;
            if (f->wait && f->wait->gen == f->wait_gen) continue;
            f->wait = NULL;
            g.cur = f;
            to_fiber(f);
            ran = 1;
            if (f->done) leave(f);
        }
        if (!ran) die("deadlock: every live thread waits at a barrier");
    }
}

/* Runs body once per thread of every block of grid x block. */
inline void launch(dim3 grid, dim3 block, const std::function<void()> &body) {
    const size_t n = (size_t)block.x * block.y * block.z;
    if (n == 0 || n > MAX_THREADS) die("block size out of range");
    if (g.stacks_cap < n) {
        free(g.fibers);
        free(g.stacks);
        g.fibers = (fiber *)calloc(n, sizeof(fiber));
        g.stacks = (char *)malloc(n * STACK);
        if (!g.fibers || !g.stacks) die("out of memory");
        g.stacks_cap = n;
    }
    g.grid = grid;
    g.block = block;
    g.n = (int)n;
    g.body = &body;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                g.bid = dim3(x, y, z);
                run_block();
            }
}

/* Stores v for this lane, waits for the warp, reads lane src's value. */
inline uint64_t exchange(uint64_t v, int src) {
    fiber *f = g.cur;
    const int w = f->lin >> 5, lane = f->lin & 31, buf = (int)(f->ops++ & 1);
    if (g.warp_alive[w] != 32) die("a shuffle in a warp that is not whole");
    g.shfl[w][buf][lane] = v;
    wait_at(&g.warp_bar[w], g.warp_alive[w]);
    return g.shfl[w][buf][src & 31];
}

inline float h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const int e = (h >> 10) & 0x1f;
    uint32_t m = h & 0x3ff, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else {
            int ee = 113;
            while (!(m & 0x400)) {
                m <<= 1;
                ee--;
            }
            bits = sign | ((uint32_t)ee << 23) | ((m & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((uint32_t)(e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: infinity */
    if (ax < 0x38800000u) {                                  /* below 2^-14: subnormal half */
        const float a = fabsf(f) * 16777216.0f;              /* units of 2^-24 */
        return (uint16_t)(sign | (uint16_t)nearbyintf(a));   /* the default rounding mode is to even */
    }
    const uint32_t mant = ax & 0x7fffff, e = (ax >> 23) - 112;
    uint32_t h = (e << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

} /* namespace kcu_emu */

#define threadIdx (kcu_emu::g.cur->tid)
#define blockIdx (kcu_emu::g.bid)
#define blockDim (kcu_emu::g.block)
#define gridDim (kcu_emu::g.grid)
#define __shared__ static

#define KCU_DEV inline
#define KCU_KERNEL extern "C"
#define KCU_CONST static const

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

KCU_DEV void kcu_sync(void) { kcu_emu::wait_at(&kcu_emu::g.block_bar, kcu_emu::g.alive); }
KCU_DEV int kcu_lane(void) { return kcu_emu::g.cur->lin & 31; }

KCU_DEV float kcu_shfl(float v, int src) {
    uint32_t b;
    memcpy(&b, &v, 4);
    b = (uint32_t)kcu_emu::exchange(b, src);
    memcpy(&v, &b, 4);
    return v;
}
KCU_DEV float kcu_shfl_xor(float v, int mask) { return kcu_shfl(v, kcu_lane() ^ mask); }
KCU_DEV int kcu_shfl_xor_i(int v, int mask) {
    return (int)(int64_t)kcu_emu::exchange((uint64_t)(int64_t)v, kcu_lane() ^ mask);
}

KCU_DEV float kcu_h2f(uint16_t h) { return kcu_emu::h2f(h); }
KCU_DEV uint16_t kcu_f2h(float f) { return kcu_emu::f2h(f); }
KCU_DEV float kcu_bf2f(uint16_t h) {
    const uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
KCU_DEV float kcu_expf(float x) { return expf(x); }
KCU_DEV float kcu_rsqrtf(float x) { return 1.0f / sqrtf(x); }

/* the aligned loads of kcu.cuh, checking the alignment the GPU needs */
KCU_DEV void kcu_ld8f(const float *p, float o[8]) {
    if ((uintptr_t)p & 15) kcu_emu::die("kcu_ld8f: address not 16-byte aligned");
    memcpy(o, p, 32);
}
KCU_DEV void kcu_ld8b(const uint8_t *p, uint32_t *lo, uint32_t *hi) {
    if ((uintptr_t)p & 3) kcu_emu::die("kcu_ld8b: address not 4-byte aligned");
    *lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    *hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
}

KCU_DEV void kcu_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    using namespace kcu_emu;
    fiber *f = g.cur;
    const int w = f->lin >> 5, lane = f->lin & 31, buf = (int)(f->ops++ & 1);
    if (g.warp_alive[w] != 32) die("mma.sync in a warp that is not whole");
    uint32_t *mine = g.mma[w][buf][lane];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b[0];
    mine[5] = b[1];
    wait_at(&g.warp_bar[w], 32);
    const uint32_t(*fr)[6] = g.mma[w][buf];
    const int gid = lane >> 2, t = lane & 3;
    float out[4];
    for (int r = 0; r < 4; r++) {
        const int row = gid + (r >= 2 ? 8 : 0), col = 2 * t + (r & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) {
            /* A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2;
             * B[k][col]: lane col * 4 + (k % 8) / 2, register 4 + (k >= 8), half k % 2 */
            const uint32_t ra = fr[(row & 7) * 4 + ((k & 7) >> 1)][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
            const uint32_t rb = fr[col * 4 + ((k & 7) >> 1)][4 + (k >= 8 ? 1 : 0)];
            const float av = h2f((uint16_t)(ra >> (16 * (k & 1)))), bv = h2f((uint16_t)(rb >> (16 * (k & 1))));
            s += av * bv;
        }
        out[r] = c[r] + s;
    }
    for (int r = 0; r < 4; r++) d[r] = out[r];
}

/* kernel<<<grid, block>>>(args...) */
#define KCU_EMU_LAUNCH(kernel, grid, block, ...) kcu_emu::launch((grid), (block), [&] { kernel(__VA_ARGS__); })

#endif
