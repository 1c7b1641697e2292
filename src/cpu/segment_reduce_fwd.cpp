// segment_reduce forward on the CPU.
//
// Paths (src/core/registry.cpp):
//   segment_reduce.fwd.cpu.flat.i64      inner == 1: a segment is a contiguous run
//       of scalars, reduced with kLanes independent accumulators (so the compiler
//       can vectorise a float sum without reassociating it) and a fixed lane tree.
//   segment_reduce.fwd.cpu.features.i64  inner > 1: a segment is n rows of `inner`
//       contiguous features; the accumulator is a row, the inner loop runs along
//       the features and vectorises.
// Both split long segments into pieces (segment_work.h). Reduction order for a
// segment is a function of its length and Plan.chunk only: deterministic.
#include <cmath>
#include <limits>
#include <type_traits>

#include "segred/trace.h"
#include "src/core/dispatch.h"
#include "src/cpu/kernels.h"
#include "src/cpu/segment_work.h"
#include "src/ops/reduce_ops.h"

namespace segred::cpu {
namespace {

constexpr int kLanes = 8;

// acc[f] <- combine(acc[f], x[j, f]) for rows j < n, features f in [f0, f1).
template <class T, class Op, bool Flat>
void reduce_rows(const T* x, int64_t n, int64_t inner, int64_t f0, int64_t f1, acc_t<T>* acc) {
  using A = acc_t<T>;
  constexpr bool kMax = std::is_same_v<Op, ops::MaxTag>, kMin = std::is_same_v<Op, ops::MinTag>;
  if (Flat && n < kLanes) {  // short segment: no lanes to set up and fold
    A v = acc[0];
    for (int64_t i = 0; i < n; ++i) v = Op::combine(v, A(load(x[i])));
    acc[0] = v;
    return;
  }
  if constexpr (Flat && (kMax || kMin)) {
    // max/min: Op::combine's `b > a || b != b` keeps the loop scalar. Here the
    // compare-select (maxps/minps) ignores NaN and a separate sticky lane records
    // any NaN (it becomes NaN once one is seen); both vectorise. Same result as
    // combine: NaN if any element is NaN, else the max/min.
    A lane[kLanes], nan[kLanes];
    for (auto& l : lane) l = Op::template identity<A>();
    for (auto& v : nan) v = A(0);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k) {
        const A b = A(load(x[i + k]));
        if constexpr (kMax) lane[k] = b > lane[k] ? b : lane[k];
        else lane[k] = b < lane[k] ? b : lane[k];
        nan[k] = b != b ? b : nan[k];
      }
    for (; i < n; ++i) lane[0] = Op::combine(lane[0], A(load(x[i])));
    for (int k = 0; k < kLanes; ++k)
      if (nan[k] != nan[k]) lane[k] = nan[k];  // nan[k] is 0, or NaN once one was seen
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int k = 0; k < w; ++k) lane[k] = Op::combine(lane[k], lane[k + w]);
    acc[0] = Op::combine(acc[0], lane[0]);
  } else if constexpr (Flat) {
    A lane[kLanes];
    for (auto& l : lane) l = Op::template identity<A>();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k) lane[k] = Op::combine(lane[k], A(load(x[i + k])));
    for (; i < n; ++i) lane[0] = Op::combine(lane[0], A(load(x[i])));
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int k = 0; k < w; ++k) lane[k] = Op::combine(lane[k], lane[k + w]);
    acc[0] = Op::combine(acc[0], lane[0]);
  } else if constexpr (kMax || kMin) {
    // Op::combine without short-circuit control flow (same predicate), so it vectorises.
    for (int64_t j = 0; j < n; ++j) {
      const T* row = x + j * inner;
#pragma omp simd
      for (int64_t f = f0; f < f1; ++f) {
        const A b = A(load(row[f])), a = acc[f];
        acc[f] = ((kMax ? b > a : b < a) | (b != b)) ? b : a;
      }
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const T* row = x + j * inner;
      for (int64_t f = f0; f < f1; ++f) acc[f] = Op::combine(acc[f], A(load(row[f])));
    }
  }
}

template <class T, class Op, bool Flat>
void run(const Plan& plan, const detail::SegmentLayout& lay, const T* x, Reduce reduce, std::optional<double> initial,
         T* out) {
  using A = acc_t<T>;
  const int64_t inner = lay.inner, S = lay.S, L = lay.L;
  const A start = initial ? A(*initial) : Op::template identity<A>();
  const bool mean = reduce == Reduce::Mean;
  const A empty_mean = initial ? A(*initial) : std::numeric_limits<A>::quiet_NaN();
  auto finish = [&](const A* acc, int64_t n, T* o) {
    for (int64_t f = 0; f < inner; ++f) {
      A v = acc[f];
      if (mean) v = n > 0 ? v / A(n) : empty_mean;
      o[f] = store<T>(v);
    }
  };
  const int64_t piece_rows = std::max<int64_t>(1, plan.chunk);

  // Phase 1: every segment of at most piece_rows rows, whole, in blocks of segments.
  auto make_state = [&] { return std::vector<A>(static_cast<size_t>(inner)); };
  const WorkSplit w = run_short_segments(lay, piece_rows, make_state,
      [&](std::vector<A>& acc, int64_t r, int64_t s, int64_t t0, int64_t t1) {
    const int64_t* o = lay.row(r);
    const T* xr = x + r * L * inner;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = o[s], n = o[s + 1] - b;
      if (n <= piece_rows) {
        if constexpr (Flat) {  // inner == 1: a scalar accumulator, no vector round trip
          A v = start;
          reduce_rows<T, Op, true>(xr + b, n, 1, 0, 1, &v);
          if (mean) v = n > 0 ? v / A(n) : empty_mean;
          out[t] = store<T>(v);
        } else {
          std::fill(acc.begin(), acc.end(), start);
          reduce_rows<T, Op, false>(xr + b * inner, n, inner, 0, inner, acc.data());
          finish(acc.data(), n, out + t * inner);
        }
      }
      if (++s == S) {
        s = 0;
        o = lay.row(++r);
        xr += L * inner;
      }
    }
  });
  if (w.longs.empty()) return;

  // Phase 2: pieces of long segments into partials, then combined in piece order.
  std::vector<A> part(size_t(w.total_pieces * inner), Op::template identity<A>());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < w.total_pieces * w.tiles; ++t) {
    const PieceTask pt = piece_task(w, t);
    const LongSegment& l = w.longs[size_t(pt.li)];
    const int64_t j0 = pt.piece * w.piece_rows, n = std::min(w.piece_rows, l.n - j0);
    const int64_t f0 = pt.tile * kFeatureTile, f1 = std::min(inner, f0 + kFeatureTile);
    reduce_rows<T, Op, Flat>(x + (l.row * L + l.begin + j0) * inner, n, inner, f0, f1,
                             part.data() + (l.first_piece + pt.piece) * inner);
  }
#pragma omp parallel
  {
    std::vector<A> acc(static_cast<size_t>(inner));
#pragma omp for schedule(dynamic, 1)
    for (size_t li = 0; li < w.longs.size(); ++li) {
      const LongSegment& l = w.longs[li];
      std::fill(acc.begin(), acc.end(), start);
      for (int64_t p = 0; p < l.pieces; ++p) {
        const A* pp = part.data() + (l.first_piece + p) * inner;
        for (int64_t f = 0; f < inner; ++f) acc[size_t(f)] = Op::combine(acc[size_t(f)], pp[f]);
      }
      finish(acc.data(), l.n, out + (l.row * S + l.seg) * inner);
    }
  }
}

}  // namespace

void segment_reduce_fwd(const Plan& plan, const detail::SegmentLayout& lay, const TensorView& data, Reduce reduce,
                        std::optional<double> initial, const TensorView& out) {
  detail::record_launch(plan.path);
  const bool flat = lay.inner == 1;
  SEGRED_DISPATCH_FLOAT(data.dtype, T, [&] {
    SEGRED_DISPATCH_REDUCE(reduce, Op, [&] {
      if (flat)
        run<T, Op, true>(plan, lay, data.ptr<const T>(), reduce, initial, out.ptr<T>());
      else
        run<T, Op, false>(plan, lay, data.ptr<const T>(), reduce, initial, out.ptr<T>());
    });
  });
}

}  // namespace segred::cpu
