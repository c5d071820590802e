#!/usr/bin/env python3
"""Writes Q8_0 copies of the vision projector fixtures (run with Debian's
python3: numpy), with the tensor types llama.cpp's converter gives an mmproj
converted with --outtype q8_0:

  gemma3-mmproj-q8_0.gguf    of gemma3-mmproj.gguf
  qwen25vl-mmproj-q8_0.gguf  of qwen25vl-mmproj-f32.gguf

  - 1-D tensors, norms, the patch convolution and the position embeddings
    stay F32;
  - Gemma 3's mm.input_projection becomes F16;
  - every other matrix becomes Q8_0 where its rows are whole blocks of 32,
    F16 where they are not (the converter's fallback).

Metadata is copied, general.file_type set to 7 (MOSTLY_Q8_0).  The greedy
output of llama-mtmd-cli 3f545bec on each copy is recorded by hand in
<name>-q8_0-mtmd.txt (the command in test_vision.c / test_vision_qwen.c).
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures as gf  # noqa: E402  (the GGUF writer and reader)

OUT = os.path.join(HERE, "data", "vision")
GGUF_UINT32 = 4


def q8_0_type(name, ne):
    """The converter's type for tensor name of shape ne (ggml order)."""
    if len(ne) < 2 or name.endswith("_norm.weight") or ".patch_embd." in name or ".position_embd." in name:
        return gf.GGML_F32
    if "input_projection" in name:
        return gf.GGML_F16
    return gf.GGML_Q8_0 if ne[0] % 32 == 0 else gf.GGML_F16


def quantize_copy(src, dst):
    g = gf.GGUFFile(os.path.join(OUT, src))
    kvs = []
    for key in g.kv_order:
        vtype, value, etype = g.kv[key]
        if key == "general.file_type":
            kvs.append((key, GGUF_UINT32, 7))
        elif etype is None:
            kvs.append((key, vtype, value))
        else:
            kvs.append((key, vtype, value, etype))
    if "general.file_type" not in g.kv:
        kvs.append(("general.file_type", GGUF_UINT32, 7))
    tensors = []
    for name in g.tensor_order:
        ne, gtype, _ = g.tensors[name]
        want = q8_0_type(name, ne)
        if want == gtype:
            raw = g.tensor_bytes(name)
            tensors.append((name, ne, gtype, lambda raw=raw: raw))
            continue
        x = g.tensor_f32(name)
        if want == gf.GGML_Q8_0:
            data = gf.quantize_q8_0(x)[0]
        elif want == gf.GGML_F16:
            data = np.ascontiguousarray(x, np.float32).astype("<f2").tobytes()
        else:
            data = np.ascontiguousarray(x, np.float32).astype("<f4").tobytes()
        tensors.append((name, ne, want, lambda data=data: data))
    gf.write_gguf(os.path.join(OUT, dst), kvs, tensors)
    counts = {}
    for _, _, t, _ in tensors:
        counts[t] = counts.get(t, 0) + 1
    print("%s: %s" % (dst, ", ".join("type %d x %d" % kv for kv in sorted(counts.items()))))


def main():
    quantize_copy("gemma3-mmproj.gguf", "gemma3-mmproj-q8_0.gguf")
    quantize_copy("qwen25vl-mmproj-f32.gguf", "qwen25vl-mmproj-q8_0.gguf")


if __name__ == "__main__":
    main()
