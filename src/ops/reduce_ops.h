// Reduction building blocks shared by the CPU and CUDA kernels (DESIGN.md, layer 4).
//
// Each op has an identity (the start value when `initial` is absent), a combine
// that is associative up to rounding, and the NaN rule of SEMANTICS.md: for
// max/min a NaN operand wins over everything, including +-inf. Because combine
// carries that rule, partial results combined across pieces, tiles or blocks
// obey it too. Mean is Sum plus a finish step (divide by the count).
#pragma once
#include <limits>

#if defined(__CUDACC__)
#define SEGRED_HD __host__ __device__ __forceinline__
#else
#define SEGRED_HD inline
#endif

namespace segred::ops {

struct SumTag {
  template <class A> static SEGRED_HD A identity() { return A(0); }
  template <class A> static SEGRED_HD A combine(A a, A b) { return a + b; }
};

struct ProdTag {
  template <class A> static SEGRED_HD A identity() { return A(1); }
  template <class A> static SEGRED_HD A combine(A a, A b) { return a * b; }
};

struct MaxTag {
  template <class A> static SEGRED_HD A identity() { return -std::numeric_limits<A>::infinity(); }
  // b replaces a when larger or NaN; a NaN `a` is never replaced (b > NaN is false).
  template <class A> static SEGRED_HD A combine(A a, A b) { return (b > a || b != b) ? b : a; }
};

struct MinTag {
  template <class A> static SEGRED_HD A identity() { return std::numeric_limits<A>::infinity(); }
  template <class A> static SEGRED_HD A combine(A a, A b) { return (b < a || b != b) ? b : a; }
};

// The max/min backward tie predicate (SEMANTICS.md): the same in every pass and
// every path. -0.0 == +0.0 is a tie; a NaN element matches a NaN output.
template <class A> SEGRED_HD bool is_extremum(A x, A out) { return x != x || x == out; }

}  // namespace segred::ops
