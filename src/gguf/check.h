/*
 * Tensor lookups with their shape and type checked: what the readers that
 * bind a file's tensors share (model/family.c's model_binder, vision/vision.c's
 * vision_binder), so a forward pass can trust every pointer it keeps.
 */
#ifndef KILN_GGUF_CHECK_H
#define KILN_GGUF_CHECK_H

#include "kiln.h"

#include "gguf/gguf.h"

/* Tensor name of f with dims dimensions (1..4) of extents ne[0..dims)
 * (ne[d] < 0: any extent >= 1) and a type kiln computes.  KILN_OK with *out
 * the tensor, or with *out NULL when it is absent and optional; otherwise
 * *out NULL and the status, the last error naming the tensor and what is
 * wrong: missing (KILN_ERR_FORMAT), its shape (KILN_ERR_FORMAT) or its type
 * (KILN_ERR_UNSUPPORTED). */
kiln_status gguf_tensor_check(const gguf_file *f, const char *name, int dims, const int64_t *ne, int optional,
                              const gguf_tensor **out);

#endif
