/* The recurrent-state pool and its snapshots (state.h). */
#include "model/state.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t model_rs_bytes(size_t slot_floats, size_t roll_floats, int n_seq, int n_snap) {
    /* live slots, snapshots, a rollback state and inputs per sequence */
    return ((uint64_t)slot_floats * (uint64_t)(2 * n_seq + n_snap) + (uint64_t)roll_floats * (uint64_t)n_seq) *
           sizeof(float);
}

kiln_status model_rs_new(const backend_backend *be, size_t slot_floats, size_t roll_floats, int n_seq, int n_snap,
                         model_rs **out) {
    *out = NULL;
    model_rs *rs = calloc(1, sizeof *rs);
    if (!rs) return base_fail(KILN_ERR_NOMEM, "out of memory");
    rs->be = be;
    rs->slot_floats = slot_floats;
    rs->n_seq = n_seq;
    rs->n_snap = n_snap;
    rs->roll_floats = roll_floats;
    rs->mem_bytes = (size_t)model_rs_bytes(slot_floats, roll_floats, n_seq, n_snap);
    /* zeroed: a new sequence's state is zero */
    rs->mem = be->map(rs->mem_bytes);
    rs->snap = calloc((size_t)(n_snap ? n_snap : 1), sizeof *rs->snap);
    rs->want = malloc((size_t)n_seq * sizeof *rs->want);
    rs->roll_a = calloc((size_t)n_seq, sizeof *rs->roll_a);
    rs->roll_n = calloc((size_t)n_seq, sizeof *rs->roll_n);
    if (!rs->mem || !rs->snap || !rs->want || !rs->roll_a || !rs->roll_n) {
        const size_t bytes = rs->mem_bytes;
        model_rs_free(rs);
        return base_fail(KILN_ERR_NOMEM, "cannot reserve %zu bytes for the recurrent state", bytes);
    }
    rs->roll_state = rs->mem + (size_t)(n_seq + n_snap) * slot_floats;
    rs->roll_in = rs->roll_state + (size_t)n_seq * slot_floats;
    for (int i = 0; i < n_snap; i++) rs->snap[i] = (model_snap){.pos = -1, .owner = -1, .pin = -1};
    for (int s = 0; s < n_seq; s++) rs->want[s] = -1;
    *out = rs;
    return KILN_OK;
}

int model_rs_mirror(model_rs *rs, const backend_backend *be_lo) {
    rs->be_lo = be_lo;
    rs->mem_lo = be_lo->map(rs->mem_bytes);
    return rs->mem_lo ? 0 : -1;
}

/* Copies and zeroing within the pool, in its mirror too. */
static void rs_copy(model_rs *rs, float *dst, const float *src, size_t bytes) {
    rs->be->copy(dst, src, bytes);
    if (rs->mem_lo) rs->be_lo->copy(model_rs_lo(rs, dst), model_rs_lo(rs, src), bytes);
}

static void rs_zero(model_rs *rs, float *dst, size_t bytes) {
    rs->be->zero(dst, bytes);
    if (rs->mem_lo) rs->be_lo->zero(model_rs_lo(rs, dst), bytes);
}

void model_rs_free(model_rs *rs) {
    if (!rs) return;
    if (rs->mem) rs->be->unmap(rs->mem, rs->mem_bytes);
    if (rs->mem_lo) rs->be_lo->unmap(rs->mem_lo, rs->mem_bytes);
    free(rs->snap);
    free(rs->want);
    free(rs->roll_a);
    free(rs->roll_n);
    free(rs);
}

/* ---- snapshot slots ---- */

#ifdef KILN_CHECKS
/* The snapshot slots, walked after each change in a checked build
 * (KILN_CHECKS, base.h): a slot is free (pos -1, no owner, no pin, not
 * keyed) or holds a state (pos >= 0) that a sequence owns or its key
 * names; a pin is a held KV block, taken for a keyed snapshot whose
 * position falls inside a block; a sequence owns at most one snapshot at a
 * position; a sequence's recorded run and wanted position are sane. */
static void rs_check(const kiln_context *c) {
    const model_rs *rs = c->rs;
    for (int i = 0; i < rs->n_snap; i++) {
        const model_snap *s = &rs->snap[i];
        if (s->pos < 0) {
            KILN_ASSERT(s->pos == -1 && s->owner == -1 && s->pin == -1 && !s->keyed);
            continue;
        }
        KILN_ASSERT(s->owner >= -1 && s->owner < rs->n_seq && (s->owner >= 0 || s->keyed));
        if (s->pin >= 0)
            KILN_ASSERT(s->keyed && s->pos % MODEL_KV_BLOCK != 0 && s->pin < c->kv.n_blocks && c->kv.ref[s->pin] > 0);
        for (int k = 0; k < i; k++)
            KILN_ASSERT(s->owner < 0 || rs->snap[k].owner != s->owner || rs->snap[k].pos != s->pos);
    }
    for (int q = 0; q < rs->n_seq; q++) KILN_ASSERT(rs->roll_n[q] >= 0 && rs->roll_a[q] >= 0 && rs->want[q] >= -1);
}
#define RS_CHECK(c) rs_check(c)
#else
#define RS_CHECK(c) ((void)0)
#endif

static void snap_drop(kiln_context *c, int i) {
    model_snap *s = &c->rs->snap[i];
    if (s->pin >= 0) model_kv_unpin(&c->kv, s->pin);
    *s = (model_snap){.pos = -1, .owner = -1, .pin = -1};
}

/* A slot for seq's state after pos tokens: the one it has there already,
 * else a free one, else the least recently used. */
static int snap_claim(kiln_context *c, int seq, int32_t pos) {
    model_rs *rs = c->rs;
    int best = -1;
    for (int i = 0; i < rs->n_snap; i++) {
        const model_snap *s = &rs->snap[i];
        if (s->owner == seq && s->pos == pos) {
            best = i;
            break;
        }
        if (best < 0 || (rs->snap[best].pos >= 0 && (s->pos < 0 || s->used < rs->snap[best].used))) best = i;
    }
    if (best < 0) return -1;
    snap_drop(c, best);
    rs->snap[best].pos = pos;
    rs->snap[best].owner = seq;
    rs->snap[best].used = ++rs->clock;
    rs->n_taken++;
    return best;
}

/* The snapshot seq owns at exactly pos, -1 if none. */
static int snap_owned(const model_rs *rs, int seq, int32_t pos) {
    for (int i = 0; i < rs->n_snap; i++)
        if (rs->snap[i].owner == seq && rs->snap[i].pos == pos) return i;
    return -1;
}

static void restore(kiln_context *c, int seq, int i) {
    model_rs *rs = c->rs;
    rs_copy(rs, model_rs_live(rs, seq), model_rs_slot(rs, i), rs->slot_floats * sizeof(float));
    rs->snap[i].used = ++rs->clock;
    rs->n_restored++;
}

/* seq no longer holds tokens from p on: its snapshots past p describe
 * other tokens from now on. */
static void disown_after(kiln_context *c, int seq, int32_t p) {
    model_rs *rs = c->rs;
    for (int i = 0; i < rs->n_snap; i++) {
        model_snap *s = &rs->snap[i];
        if (s->owner != seq || s->pos <= p) continue;
        if (s->keyed)
            s->owner = -1;
        else
            snap_drop(c, i);
    }
}

void model_rs_record(model_rs *rs, int seq, int32_t a, int32_t n) {
    rs->roll_a[seq] = a;
    rs->roll_n[seq] = n;
    if (n)
        rs_copy(rs, rs->roll_state + (size_t)seq * rs->slot_floats, model_rs_live(rs, seq),
                rs->slot_floats * sizeof(float));
}

int model_rs_plan(kiln_context *c, int seq, int32_t a, int32_t b, int32_t *pos, float **dst, int max) {
    model_rs *rs = c->rs;
    if (!rs || rs->n_snap == 0) return 0;
    int32_t cand[3];
    int nc = 0;
    const int32_t w = rs->want[seq];
    if (w > a && w <= b) { /* the prefix kiln_seq_reuse found shared */
        cand[nc++] = w;
        rs->want[seq] = -1;
    }
    if (b - a > 1) {
        /* a prompt chunk: its last block boundary (an identical prompt can
         * reuse up to it and still decode its last token) and its end (a
         * chat's next turn, a longer prompt's next chunk) */
        const int32_t blk = b / MODEL_KV_BLOCK * MODEL_KV_BLOCK;
        if (blk > a && blk < b) cand[nc++] = blk;
        cand[nc++] = b;
    }
    /* ascending, unique */
    for (int i = 1; i < nc; i++)
        for (int k = i; k > 0 && cand[k] < cand[k - 1]; k--) {
            const int32_t t = cand[k];
            cand[k] = cand[k - 1];
            cand[k - 1] = t;
        }
    int n = 0;
    for (int i = 0; i < nc && n < max; i++) {
        if (n && cand[i] == pos[n - 1]) continue;
        const int slot = snap_claim(c, seq, cand[i]);
        if (slot < 0) break;
        pos[n] = cand[i];
        dst[n++] = model_rs_slot(rs, slot);
    }
    /* the positions to capture fall in the run, ascending */
    for (int i = 0; i < n; i++) KILN_DASSERT(pos[i] > a && pos[i] <= b && (i == 0 || pos[i] > pos[i - 1]));
    RS_CHECK(c);
    return n;
}

void model_rs_cache(kiln_context *c, int seq, const int32_t *tokens, int32_t n) {
    model_rs *rs = c->rs;
    if (!rs || rs->n_snap == 0) return;
    const model_seq *s = &c->kv.seqs[seq];
    if (n > s->len) n = s->len;
    if (n > 0 && snap_owned(rs, seq, n) < 0 && n == s->len) { /* the state as it is now */
        const int i = snap_claim(c, seq, n);
        if (i >= 0) rs_copy(rs, model_rs_slot(rs, i), model_rs_live(rs, seq), rs->slot_floats * sizeof(float));
    }
    for (int i = 0; i < rs->n_snap; i++) {
        model_snap *sn = &rs->snap[i];
        if (sn->owner != seq || sn->keyed || sn->pos > n || sn->pos <= 0) continue;
        const int32_t nb = sn->pos / MODEL_KV_BLOCK, part = sn->pos % MODEL_KV_BLOCK;
        sn->key = model_kv_chain_key(tokens, nb);
        memset(sn->tail, 0, sizeof sn->tail);
        memcpy(sn->tail, tokens + (size_t)nb * MODEL_KV_BLOCK, (size_t)part * sizeof(int32_t));
        if (part) {
            sn->pin = s->blocks[nb];
            model_kv_pin(&c->kv, sn->pin);
        }
        sn->keyed = 1;
    }
    RS_CHECK(c);
}

int32_t model_rs_reuse(kiln_context *c, int seq, const int32_t *tokens, int32_t n) {
    model_rs *rs = c->rs;
    model_kv *kv = &c->kv;
    /* the whole blocks the KV cache shares, then the longest snapshot
     * within them (or just past them, its tail in a pinned block) whose
     * tokens are these */
    const int32_t L = model_kv_reuse(kv, seq, tokens, n, n - 1);
    int best = -1;
    for (int i = 0; rs && i < rs->n_snap; i++) {
        const model_snap *s = &rs->snap[i];
        if (!s->keyed || s->pos <= 0 || s->pos > n - 1 || (best >= 0 && s->pos <= rs->snap[best].pos)) continue;
        const int32_t nb = s->pos / MODEL_KV_BLOCK, part = s->pos % MODEL_KV_BLOCK;
        if (nb * MODEL_KV_BLOCK > L || (s->pos > L && s->pin < 0)) continue;
        if (s->key != model_kv_chain_key(tokens, nb) ||
            memcmp(s->tail, tokens + (size_t)nb * MODEL_KV_BLOCK, (size_t)part * 4))
            continue;
        best = i;
    }
    int32_t got = 0;
    if (best >= 0) {
        const model_snap *s = &rs->snap[best];
        if (s->pos <= L) {
            model_kv_truncate(kv, seq, s->pos);
            got = kv->seqs[seq].len == s->pos ? s->pos : 0; /* (no block to copy a shared one into) */
        } else {                                            /* the tail's cells from the block the snapshot pinned */
            const int32_t b = model_kv_copy_block(kv, s->pin, s->pos % MODEL_KV_BLOCK);
            if (b >= 0) {
                model_kv_append_block(kv, seq, b, s->pos);
                got = s->pos;
            }
        }
        if (got) restore(c, seq, best);
    }
    if (!got) model_kv_truncate(kv, seq, 0);
    if (!got) rs_zero(rs, model_rs_live(rs, seq), rs->slot_floats * sizeof(float));
    rs->roll_n[seq] = 0;
    /* the KV cache shares more than any snapshot covers: take one there
     * as this prompt goes by, so the next prompt with this prefix finds it */
    rs->want[seq] = L > got ? L : -1;
    /* the sequence holds exactly the tokens whose state it took */
    KILN_DASSERT(c->kv.seqs[seq].len == got && got <= L + MODEL_KV_BLOCK);
    RS_CHECK(c);
    return got;
}

kiln_status model_rs_truncate(kiln_context *c, int seq, int32_t p) {
    model_rs *rs = c->rs;
    const int32_t len = c->kv.seqs[seq].len;
    if (p >= len) return KILN_OK;
    if (p == 0) {
        model_kv_truncate(&c->kv, seq, 0);
        rs_zero(rs, model_rs_live(rs, seq), rs->slot_floats * sizeof(float));
        disown_after(c, seq, 0);
        rs->want[seq] = -1;
        rs->roll_n[seq] = 0;
        KILN_DASSERT(c->kv.seqs[seq].len == 0);
        RS_CHECK(c);
        return KILN_OK;
    }
    const int32_t ra = rs->roll_a[seq], rn = rs->roll_n[seq];
    if (rn && p >= ra && p < ra + rn && ra + rn == len) { /* inside the recorded run: replay up to p */
        rs_copy(rs, model_rs_live(rs, seq), rs->roll_state + (size_t)seq * rs->slot_floats,
                rs->slot_floats * sizeof(float));
        if (p > ra) c->m->arch->family->replay(c, seq, p - ra);
        rs->roll_n[seq] = p > ra ? p - ra : 0; /* what remains recorded */
        rs->n_replayed++;
        model_kv_truncate(&c->kv, seq, p);
        disown_after(c, seq, p);
        KILN_DASSERT(c->kv.seqs[seq].len == p); /* a block to copy a shared one into is always there (model.h) */
        RS_CHECK(c);
        return KILN_OK;
    }
    const int i = snap_owned(rs, seq, p);
    if (i < 0)
        return model_fail(c, KILN_ERR_STATE,
                          "sequence %d: its recurrent state cannot be cut back to position %d (it holds %d tokens; "
                          "kiln_seq_truncate_point gives where it can)",
                          seq, p, len);
    restore(c, seq, i);
    model_kv_truncate(&c->kv, seq, p);
    disown_after(c, seq, p);
    rs->roll_n[seq] = 0;
    KILN_DASSERT(c->kv.seqs[seq].len == p);
    RS_CHECK(c);
    return KILN_OK;
}

int32_t model_rs_restorable(const kiln_context *c, int seq, int32_t p) {
    const model_rs *rs = c->rs;
    const int32_t len = c->kv.seqs[seq].len;
    if (p >= len) return len;
    const int32_t ra = rs->roll_a[seq], rn = rs->roll_n[seq];
    if (rn && p >= ra && ra + rn == len) return p; /* replayable */
    int32_t best = 0;
    for (int i = 0; i < rs->n_snap; i++)
        if (rs->snap[i].owner == seq && rs->snap[i].pos <= p && rs->snap[i].pos > best) best = rs->snap[i].pos;
    return best;
}

kiln_status model_rs_copy(kiln_context *c, int src, int dst) {
    if (model_kv_fork(&c->kv, src, dst))
        return model_fail(c, KILN_ERR_STATE, "cannot copy sequence %d into %d: it is not empty, or no block is free",
                          src, dst);
    if (c->rs) {
        rs_copy(c->rs, model_rs_live(c->rs, dst), model_rs_live(c->rs, src), c->rs->slot_floats * sizeof(float));
        c->rs->want[dst] = -1;
        c->rs->roll_n[dst] = 0;
        RS_CHECK(c);
    }
    return KILN_OK;
}
