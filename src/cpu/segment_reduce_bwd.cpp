// segment_reduce backward on the CPU (SEMANTICS.md, segment_reduce_backward).
//
// Paths: segment_reduce.bwd.cpu.flat.i64 (inner == 1) and
// segment_reduce.bwd.cpu.features.i64 (inner > 1); same work split as the forward
// (segment_work.h). Per reduce, for a segment [b, b+n) and its upstream g:
//   sum   gi_j = g                   mean  gi_j = g / n
//   max/min, M = {j : isnan(x_j) || x_j == out}, c = |M|:
//         split: gi_j = g / c on M (every sign of g); first/last: g on the first/
//         last j of M. Needs c (or the first/last index) before writing, so a
//         segment is a stats pass then a write pass; a whole segment is still in
//         cache for the second pass, a long one is split into pieces whose stats
//         are combined in order.
//   prod  gi_j = g * start * prod_{k<j} x_k * prod_{k>j} x_k: an exclusive prefix
//         (running) times an exclusive suffix (a backward pass into scratch), O(n),
//         no division, so zeros need no special case. Long segments: piece
//         products give each piece its prefix and suffix factors.
// Rows outside every segment ([0, off[0]) and [off[S], L)) get 0.
#include <cmath>
#include <cstring>
#include <limits>

#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/cpu/kernels.h"
#include "src/cpu/segment_work.h"
#include "src/cpu/stream_store.h"
#include "src/ops/reduce_ops.h"

namespace segred::cpu {
namespace {

// Per-feature statistics of a max/min segment (or piece) for the write pass.
struct TieStats {
  int64_t count = 0;
  int64_t first = -1;  // row index within the segment
  int64_t last = -1;
  void add(const TieStats& o) {  // o follows *this in segment order
    if (o.count == 0) return;
    if (count == 0) first = o.first;
    last = o.last;
    count += o.count;
  }
};

template <class T>
struct Args {
  using A = acc_t<T>;
  const T* g;   // [outer, S, inner]
  const T* y;   // forward output, same shape
  const T* x;   // [outer, L, inner]
  T* gi;        // [outer, L, inner]
  int64_t L, S, inner;
  Reduce reduce;
  Tie tie;
  A start;  // initial or the identity
};

// ops::is_extremum as 0/1 without short-circuit control flow, so that the
// split loops below vectorise (same predicate, same result).
template <class A> inline int32_t tie_bit(A x, A out) { return int32_t((x != x) | (x == out)); }

// Stats of rows [j0, j0+n) (segment-relative indices), features [f0, f1).
// tie=split needs only the counts: a branch-free counting loop (along the rows
// when inner == 1, along the features otherwise). n <= Plan.chunk <= 2^16 rows,
// so int32 counts cannot overflow.
template <class T>
void tie_stats(const Args<T>& a, const T* x, const T* y, int64_t j0, int64_t n, int64_t f0, int64_t f1,
               TieStats* st) {
  using A = acc_t<T>;
  if (a.tie == Tie::Split) {
    if (a.inner == 1) {
      const A yv = A(load(y[0]));
      const T* xs = x + j0;
      int32_t c = 0;
#pragma omp simd reduction(+ : c)
      for (int64_t j = 0; j < n; ++j) c += tie_bit(A(load(xs[j])), yv);
      st[0].count += c;
    } else {
      thread_local std::vector<int32_t> cnt;
      cnt.assign(size_t(f1 - f0), 0);
      int32_t* cp = cnt.data() - f0;
      for (int64_t j = 0; j < n; ++j) {
        const T* row = x + (j0 + j) * a.inner;
#pragma omp simd
        for (int64_t f = f0; f < f1; ++f) cp[f] += tie_bit(A(load(row[f])), A(load(y[f])));
      }
      for (int64_t f = f0; f < f1; ++f) st[f].count += cp[f];
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* row = x + (j0 + j) * a.inner;
    for (int64_t f = f0; f < f1; ++f) {
      if (!ops::is_extremum(A(load(row[f])), A(load(y[f])))) continue;
      TieStats& s = st[f];
      if (s.count++ == 0) s.first = j0 + j;
      s.last = j0 + j;
    }
  }
}

// Writes rows [j0, j0+n) of the segment to out (out[0] is row j0).
template <class T>
void tie_write(const Args<T>& a, const T* x, const T* y, const T* g, T* out_rows, int64_t j0, int64_t n, int64_t f0,
               int64_t f1, const TieStats* st) {
  using A = acc_t<T>;
  if (a.tie == Tie::Split) {
    // Branch-free select of g / c (the same value the general loop computes).
    if (a.inner == 1) {
      const A yv = A(load(y[0]));
      const A v = st[0].count ? A(load(g[0])) / A(st[0].count) : A(0);
      const T* xs = x + j0;
      T* out = out_rows;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) out[j] = store<T>(tie_bit(A(load(xs[j])), yv) ? v : A(0));
    } else {
      thread_local std::vector<A> scale;
      scale.resize(size_t(f1 - f0));
      A* sp = scale.data() - f0;
      for (int64_t f = f0; f < f1; ++f) sp[f] = st[f].count ? A(load(g[f])) / A(st[f].count) : A(0);
      for (int64_t j = 0; j < n; ++j) {
        const T* row = x + (j0 + j) * a.inner;
        T* out = out_rows + j * a.inner;
#pragma omp simd
        for (int64_t f = f0; f < f1; ++f) {
          const A xv = A(load(row[f])), yv = A(load(y[f])), sv = sp[f];  // unconditional loads
          out[f] = store<T>(tie_bit(xv, yv) ? sv : A(0));
        }
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* row = x + (j0 + j) * a.inner;
    T* out = out_rows + j * a.inner;
    for (int64_t f = f0; f < f1; ++f) {
      A v = A(0);
      if (ops::is_extremum(A(load(row[f])), A(load(y[f])))) {
        const A gf = A(load(g[f]));
        if (a.tie == Tie::Split)
          v = gf / A(st[f].count);
        else if (a.tie == Tie::First)
          v = (j0 + j == st[f].first) ? gf : A(0);
        else
          v = (j0 + j == st[f].last) ? gf : A(0);
      }
      out[f] = store<T>(v);
    }
  }
}

// prod: rows [j0, j0+n) to out_rows (row j0 first); pre/suf are the products of the
// rows before / after this piece within the segment (per feature, already
// including nothing of this piece).
template <class T>
void prod_write(const Args<T>& a, const T* x, const T* g, T* out_rows, int64_t j0, int64_t n, int64_t f0, int64_t f1,
                const acc_t<T>* pre, const acc_t<T>* suf, std::vector<acc_t<T>>& scratch) {
  using A = acc_t<T>;
  const int64_t w = f1 - f0;
  scratch.resize(size_t(n * w));
  // scratch[j] = suf * prod_{k>j in piece} x_k
  std::vector<A> run(suf + f0, suf + f1);
  for (int64_t j = n - 1; j >= 0; --j) {
    const T* row = x + (j0 + j) * a.inner;
    A* s = scratch.data() + j * w;
    for (int64_t f = 0; f < w; ++f) {
      s[f] = run[size_t(f)];
      run[size_t(f)] *= A(load(row[f0 + f]));
    }
  }
  std::vector<A> p(pre + f0, pre + f1);
  for (int64_t j = 0; j < n; ++j) {
    const T* row = x + (j0 + j) * a.inner;
    T* out = out_rows + j * a.inner;
    const A* s = scratch.data() + j * w;
    for (int64_t f = 0; f < w; ++f) {
      out[f0 + f] = store<T>(A(load(g[f0 + f])) * a.start * p[size_t(f)] * s[f]);
      p[size_t(f)] *= A(load(row[f0 + f]));
    }
  }
}

template <class T>
void fill_rows(const Args<T>& a, T* gi, int64_t n, int64_t f0, int64_t f1, const T* g, acc_t<T> scale, bool zero) {
  using A = acc_t<T>;
  // Every row gets the same values: convert them once, then copy rows (the
  // per-element conversion was not hoisted, since gi may alias g for the compiler).
  if (a.inner == 1) {
    std::fill(gi + f0, gi + (n - 1) * a.inner + f1, store<T>(zero ? A(0) : A(load(g[f0])) * scale));
    return;
  }
  thread_local std::vector<T> row;
  row.resize(size_t(f1 - f0));
  for (int64_t f = f0; f < f1; ++f) row[size_t(f - f0)] = store<T>(zero ? A(0) : A(load(g[f])) * scale);
  for (int64_t j = 0; j < n; ++j) std::memcpy(gi + j * a.inner + f0, row.data(), size_t(f1 - f0) * sizeof(T));
}

template <class T>
void run(const Plan& plan, const detail::SegmentLayout& lay, const Args<T>& a) {
  using A = acc_t<T>;
  const int64_t inner = a.inner, S = a.S, L = a.L;
  const bool tie_op = a.reduce == Reduce::Max || a.reduce == Reduce::Min;
  const int64_t piece_rows = std::max<int64_t>(1, plan.chunk);

  // Rows outside every segment.
#pragma omp parallel for schedule(static) if (lay.outer * L * inner >= kSerialWork)
  for (int64_t r = 0; r < lay.outer; ++r) {
    const int64_t* o = lay.row(r);
    T* gr = a.gi + r * L * inner;
    std::fill(gr, gr + o[0] * inner, store<T>(A(0)));
    std::fill(gr + o[S] * inner, gr + L * inner, store<T>(A(0)));
  }

  auto seg_ptrs = [&](int64_t r, int64_t s, int64_t b) {
    struct P { const T *x, *y, *g; T* gi; };
    return P{a.x + (r * L + b) * inner, a.y + (r * S + s) * inner, a.g + (r * S + s) * inner,
             a.gi + (r * L + b) * inner};
  };

  // Phase 1: whole segments, in blocks of segments.
  // grad_input is write-only here: large ones leave through streaming stores.
  const bool stream = a.L * a.inner * int64_t(sizeof(T)) * lay.outer >= stream_output_bytes();
  struct State {
    StagedOutput<T> out;
    std::vector<TieStats> st;
    std::vector<A> pre, suf, scratch;
  };
  auto make_state = [&] {
    State z{StagedOutput<T>(stream), {}, {}, {}, {}};
    z.st.resize(size_t(tie_op ? inner : 0));
    if (a.reduce == Reduce::Prod) {
      z.pre.assign(size_t(inner), A(1));
      z.suf.assign(size_t(inner), A(1));
    }
    return z;
  };
  const WorkSplit w = run_short_segments(lay, piece_rows, make_state,
      [&](State& z, int64_t r, int64_t s, int64_t t0, int64_t t1) {
    const int64_t* o = lay.row(r);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = o[s], n = o[s + 1] - b;
      if (n <= piece_rows && n > 0) {
        const auto p = seg_ptrs(r, s, b);
        T* gi = z.out.target(p.gi, n * inner);
        switch (a.reduce) {
          case Reduce::Sum: fill_rows(a, gi, n, 0, inner, p.g, A(1), false); break;
          case Reduce::Mean: fill_rows(a, gi, n, 0, inner, p.g, A(1) / A(n), false); break;
          case Reduce::Prod:
            prod_write(a, p.x, p.g, gi, 0, n, 0, inner, z.pre.data(), z.suf.data(), z.scratch);
            break;
          default:
            std::fill(z.st.begin(), z.st.end(), TieStats{});
            tie_stats(a, p.x, p.y, 0, n, 0, inner, z.st.data());
            tie_write(a, p.x, p.y, p.g, gi, 0, n, 0, inner, z.st.data());
        }
      }
      if (++s == S) {
        s = 0;
        o = lay.row(++r);
      }
    }
  });
  if (w.longs.empty()) return;

  // Phase 2: long segments in (piece, tile) tasks. Ops that need segment-wide
  // values first gather per-piece values, combine them per segment, then write.
  const int64_t tasks = w.total_pieces * w.tiles;
  std::vector<TieStats> pst;      // max/min: per piece, then per segment prefix-combined
  std::vector<A> pprod, ppre, psuf;  // prod: per piece products, exclusive prefix/suffix
  if (tie_op || a.reduce == Reduce::Prod) {
    if (tie_op) pst.assign(size_t(w.total_pieces * inner), TieStats{});
    else pprod.assign(size_t(w.total_pieces * inner), A(1));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const PieceTask pt = piece_task(w, t);
      const LongSegment& l = w.longs[size_t(pt.li)];
      const int64_t j0 = pt.piece * w.piece_rows, n = std::min(w.piece_rows, l.n - j0);
      const int64_t f0 = pt.tile * kFeatureTile, f1 = std::min(inner, f0 + kFeatureTile);
      const auto p = seg_ptrs(l.row, l.seg, l.begin);
      const int64_t slot = (l.first_piece + pt.piece) * inner;
      if (tie_op) {
        tie_stats(a, p.x, p.y, j0, n, f0, f1, pst.data() + slot);
      } else {
        for (int64_t j = 0; j < n; ++j)
          for (int64_t f = f0; f < f1; ++f) pprod[size_t(slot + f)] *= A(load(p.x[(j0 + j) * inner + f]));
      }
    }
    if (a.reduce == Reduce::Prod) {
      ppre.assign(pprod.size(), A(1));
      psuf.assign(pprod.size(), A(1));
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t li = 0; li < w.longs.size(); ++li) {
      const LongSegment& l = w.longs[li];
      const int64_t base = l.first_piece * inner;
      if (tie_op) {
        // Segment-wide stats, stored in the first piece's slot.
        for (int64_t p = 1; p < l.pieces; ++p)
          for (int64_t f = 0; f < inner; ++f) pst[size_t(base + f)].add(pst[size_t(base + p * inner + f)]);
      } else {
        for (int64_t f = 0; f < inner; ++f) {
          A run = A(1);
          for (int64_t p = 0; p < l.pieces; ++p) {
            ppre[size_t(base + p * inner + f)] = run;
            run *= pprod[size_t(base + p * inner + f)];
          }
          run = A(1);
          for (int64_t p = l.pieces - 1; p >= 0; --p) {
            psuf[size_t(base + p * inner + f)] = run;
            run *= pprod[size_t(base + p * inner + f)];
          }
        }
      }
    }
  }
#pragma omp parallel
  {
    std::vector<A> scratch;
    // A piece's rows are contiguous in grad_input when it spans every feature.
    StagedOutput<T> staged(stream && w.tiles == 1);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const PieceTask pt = piece_task(w, t);
      const LongSegment& l = w.longs[size_t(pt.li)];
      const int64_t j0 = pt.piece * w.piece_rows, n = std::min(w.piece_rows, l.n - j0);
      const int64_t f0 = pt.tile * kFeatureTile, f1 = std::min(inner, f0 + kFeatureTile);
      const auto p = seg_ptrs(l.row, l.seg, l.begin);
      const int64_t slot = (l.first_piece + pt.piece) * inner;
      T* gi = w.tiles == 1 ? staged.target(p.gi + j0 * inner, n * inner) : p.gi + j0 * inner;
      switch (a.reduce) {
        case Reduce::Sum: fill_rows(a, gi, n, f0, f1, p.g, A(1), false); break;
        case Reduce::Mean: fill_rows(a, gi, n, f0, f1, p.g, A(1) / A(l.n), false); break;
        case Reduce::Prod:
          prod_write(a, p.x, p.g, gi, j0, n, f0, f1, ppre.data() + slot, psuf.data() + slot, scratch);
          break;
        default: tie_write(a, p.x, p.y, p.g, gi, j0, n, f0, f1, pst.data() + l.first_piece * inner);
      }
    }
  }
}

}  // namespace

void segment_reduce_bwd(const Plan& plan, const detail::SegmentLayout& lay, const TensorView& grad,
                        const TensorView& output, const TensorView& data, Reduce reduce,
                        std::optional<double> initial, Tie tie, const TensorView& grad_input) {
  detail::record_launch(plan.path);
  SEGRED_DISPATCH_FLOAT(data.dtype, T, [&] {
    using A = acc_t<T>;
    A start = A(1);
    if (reduce == Reduce::Prod && initial) start = A(*initial);
    Args<T> a{grad.ptr<const T>(), output.ptr<const T>(), data.ptr<const T>(), grad_input.ptr<T>(),
              lay.L, lay.S, lay.inner, reduce, tie, start};
    run<T>(plan, lay, a);
  });
}

}  // namespace segred::cpu
