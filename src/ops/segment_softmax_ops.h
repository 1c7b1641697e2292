// The online max/sum merge of the ragged softmax family (host/device).
//
// State (m, s) stands for sum_i exp(x_i - m) = s over the values seen so far.
// Adding x: -inf adds nothing; x > m rescales s by exp(m - x) and moves m to x;
// otherwise s += exp(x - m). A NaN never compares greater, so it falls through to
// s += exp(NaN) = NaN and poisons s: NaN wins. +inf becomes m with s = 1 (every
// finite value then adds exp(-inf) = 0), so logsumexp = +inf; softmax treats a
// +inf like NaN (SEMANTICS.md), which the `bad` flag records.
#pragma once
#include <cmath>
#include <limits>

#include "src/ops/reduce_ops.h"

namespace segred::ops {

template <class A>
struct OnlineLse {
  A m = -std::numeric_limits<A>::infinity();
  A s = A(0);
  bool bad = false;  // a NaN or +inf was seen: softmax of this segment is NaN

  SEGRED_HD void add(A x) {
    if (x != x || x == std::numeric_limits<A>::infinity()) bad = true;
    if (x == -std::numeric_limits<A>::infinity()) return;
    if (x > m) {
      s = s * std::exp(m - x) + A(1);
      m = x;
    } else if (x == m) {
      s += A(1);  // also keeps +inf + +inf from becoming exp(inf - inf) = NaN
    } else {
      s += std::exp(x - m);
    }
  }
  // Merges the state of another run of values (a block of the same segment).
  SEGRED_HD void merge(const OnlineLse& o) {
    bad = bad || o.bad;
    const A mm = o.m > m ? o.m : m;
    s = s * (m == mm ? A(1) : std::exp(m - mm)) + o.s * (o.m == mm ? A(1) : std::exp(o.m - mm));
    m = mm;
  }
  // logsumexp; -inf when empty or all -inf.
  SEGRED_HD A lse() const { return s == A(0) ? -std::numeric_limits<A>::infinity() : m + std::log(s); }
  // softmax and log_softmax are NaN for a bad segment and for an all -inf one.
  SEGRED_HD bool softmax_nan() const { return bad || s == A(0); }
};

}  // namespace segred::ops
