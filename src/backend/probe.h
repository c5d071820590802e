/*
 * backend — which CPU paths and GPU runtimes this machine offers
 * (kiln_backend_probe in kiln.h).  The CPU rows are a pure function of the
 * feature bits, so tests can ask it about machines they are not on (an
 * AMX unit a VM advertises but does not enable, AVX-512 without VNNI).
 */
#ifndef KILN_BACKEND_PROBE_H
#define KILN_BACKEND_PROBE_H

#include "kiln.h"
#include "quant/quant.h"

/* The CPU rows for features p, the level in use (active) and the best the
 * CPU has (top), both QUANT_ISA_*; returns how many rows there are. */
int backend_cpu_rows(const quant_cpu *p, int active, int top, kiln_backend_status *out, int cap);
/* The same rows as an aarch64 build gives them (scalar = 0, neon = 1,
 * dotprod = 2), on any build: backend_cpu_rows is this one there. */
int backend_cpu_rows_aarch64(const quant_cpu *p, int active, int top, kiln_backend_status *out, int cap);

#endif
