// Index logic of the CUDA ragged softmax rows path (src/cuda/segment_softmax_rows.cuh),
// host/device, so the CPU tests (tests/cpp/test_segment_softmax_tiles.cpp, "Rows*")
// check it against the CPU's metadata normalisation without a GPU.
//
//   q: metadata item i = r*k + c (k = S lengths / S + 1 offsets per row r) scanned
//      per row with QOp over clamped values: lengths -> saturating sum (cap L),
//      offsets -> running max; qv[i] = the scan value. Exactly the CPU's clamping
//      (src/core/segments.cpp: o[0] = clamp(in[0]), o[i+1] = clamp(in[i+1], o[i], L);
//      lengths: o[i+1] = min(L, o[i] + clamp(len[i], 0, L))).
//   QView: merge segment v in [0, U) -> positions [a, b) (src/core/segment_geometry.h).
//   Long list: entry e = (merge segment, first row a, rows n, first chunk id base),
//      bases increasing in e (one 64-bit atomic hands out both); chunk ch belongs
//      to the last entry with base <= ch and covers rows [a + j*C, min(a + n, a + (j+1)*C)).
#pragma once
#include <cstdint>

#include "src/ops/reduce_ops.h"

namespace segred::ops::sr {

struct KV {
  int64_t k, v;  // row (-1: the empty element), clamped value
};

SEGRED_HD int64_t clamp_meta(int64_t v, int64_t L) { return v < 0 ? int64_t(0) : (v > L ? L : v); }

// Segmented (by row) scan operator; associative on items in row-major order.
struct QOp {
  int64_t L;
  bool sum;
  SEGRED_HD KV operator()(const KV& a, const KV& b) const {
    if (b.k < 0) return a;
    if (a.k != b.k) return b;
    const int64_t v = sum ? (a.v + b.v < L ? a.v + b.v : L) : (a.v > b.v ? a.v : b.v);
    return KV{b.k, v};
  }
};

template <class Idx>
struct QView {
  const int64_t* qv = nullptr;
  Idx S = 0, L = 0, outer = 0, U = 1;
  bool lengths = false;
  // r*L + o_r[c], c in [0, S]
  SEGRED_HD Idx pos(Idx r, Idx c) const {
    const int64_t o = lengths ? (c == 0 ? int64_t(0) : qv[r * S + c - 1]) : qv[r * (S + 1) + c];
    return r * L + Idx(o);
  }
  // Merge segment v in [0, U): [a, b). v = 0: before row 0's first offset;
  // v = 1 + r(S+1) + c: segment c of row r, or (c == S) the ghost up to the next
  // row's first offset (the end of the tensor after the last row).
  SEGRED_HD void bounds(Idx v, Idx& a, Idx& b) const {
    if (v == 0) {
      a = 0;
      b = outer > 0 ? pos(0, 0) : Idx(0);
      return;
    }
    const Idx r = (v - 1) / (S + 1), c = (v - 1) - r * (S + 1);
    a = pos(r, c);
    b = c < S ? pos(r, c + 1) : (r + 1 < outer ? pos(r + 1, 0) : outer * L);
  }
};

// The entry whose chunk range holds chunk ch: the last e < entries with base[e] <= ch.
template <class Idx>
SEGRED_HD Idx entry_of(const Idx* base, Idx entries, Idx ch) {
  Idx lo = 0, hi = entries;
  while (hi - lo > 1) {
    const Idx mid = lo + (hi - lo) / 2;
    if (base[mid] <= ch) lo = mid;
    else hi = mid;
  }
  return lo;
}

template <class Idx>
struct Chunk {
  Idx e, r0, cn;  // entry, first row, rows
};

template <class Idx>
SEGRED_HD Chunk<Idx> chunk_of(const Idx* base, const Idx* ent_a, const Idx* ent_n, Idx entries, Idx ch, Idx C) {
  Chunk<Idx> k;
  k.e = entry_of(base, entries, ch);
  const Idx j = ch - base[k.e], n = ent_n[k.e];
  k.r0 = ent_a[k.e] + j * C;
  k.cn = n - j * C < C ? n - j * C : C;
  return k;
}

template <class Idx>
SEGRED_HD Idx chunks_of(Idx n, Idx C) { return (n + C - 1) / C; }

}  // namespace segred::ops::sr
