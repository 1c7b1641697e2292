// The first include of the CPU softmax kernel files (softmax_fwd.cpp,
// softmax_bwd.cpp): compiler settings that must precede every other include,
// and what the per-instruction-set kernel builds (softmax_isa_kernels.inc) use.
//
// no-trapping-math: GCC keeps the range clamps of the scalar polynomial exp
// (src/ops/softmax_ops.h) as branches under its default -ftrapping-math
// (measured 8x slower); no code here relies on floating-point exception flags.
// (Clang's default already.)
//
// -Wpsabi: the kernels' vector types pass through small always-inline helpers of
// src/ops (exp_poly and its parts) defined outside the target regions; they are
// inlined into the kernels at every optimisation level, so GCC's note on their
// out-of-line ABI does not apply.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "src/cpu/softmax_kernels.h"
#ifdef SEGRED_SOFTMAX_X86
#include <immintrin.h>
#endif

#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/cpu/half_convert.h"
#include "src/ops/softmax_ops.h"
