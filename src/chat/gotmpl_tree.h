/* The parsed form of a Go template (gotmpl.h): gotmpl_parse.c builds it,
 * gotmpl.c renders it.  Nodes are numbered in document order; the tree and its
 * strings live in one arena freed with the template. */
#ifndef KILN_CHAT_GOTMPL_TREE_H
#define KILN_CHAT_GOTMPL_TREE_H

#include "chat/gotmpl.h"

#include <stddef.h>

#define GT_OUT_MAX (16u << 20) /* bytes of a buffer outside a render's budgets */
#define GT_VARS_MAX 256        /* live variables */
#define GT_DEPTH_MAX 64        /* nested controls and parentheses */

typedef struct ablock {
    struct ablock *next;
    size_t used, cap;
    max_align_t data[];
} ablock;

enum { O_DOT, O_FIELD, O_VAR, O_STR, O_INT, O_REAL, O_BOOL, O_NIL, O_FUNC, O_PIPE };

struct gpipe;

typedef struct gop {
    int kind;
    int id;             /* document order (fields: the cut point) */
    const char *name;   /* O_VAR ("$" or "$x"), O_FUNC, O_STR (its bytes) */
    size_t len;         /* O_STR */
    long long i;        /* O_INT, O_BOOL */
    double d;           /* O_REAL */
    const char **chain; /* fields after the operand (O_FIELD: all of them) */
    int n_chain;
    struct gpipe *pipe; /* O_PIPE */
} gop;

typedef struct gcmd {
    gop **args;
    int n;
} gcmd;

typedef struct gpipe {
    const char *vars[2]; /* declared or assigned variables */
    int n_vars, assign;  /* assign: '=' rather than ':=' */
    gcmd **cmds;
    int n_cmds;
    int line;
} gpipe;

enum { N_TEXT, N_ACTION, N_IF, N_RANGE, N_WITH, N_BREAK, N_CONTINUE };

struct glist;

typedef struct gnode {
    int kind, id, line;
    const char *text; /* N_TEXT */
    size_t len;
    gpipe *pipe;
    struct glist *body, *alt;
} gnode;

typedef struct glist {
    gnode **v;
    int n;
} glist;

struct kgt {
    ablock *arena;
    glist *root;
    int n_ids;
    int cut_id;        /* id of the first .Response field, or INT_MAX */
    int uses_messages; /* an identifier .Messages (any case) appears */
};

#endif
