// Runtime value -> template instantiation, in one place (DESIGN.md): adding a
// dtype or a reduce is one line here, not a copy of a kernel.
#pragma once
#include "segred/dtype.h"
#include "segred/error.h"
#include "segred/segment_reduce.h"

// SEGRED_DISPATCH_FLOAT(dtype, T, body): runs body with T bound to the storage type.
#define SEGRED_DISPATCH_FLOAT(DTYPE, T, ...)                                                           \
  [&] {                                                                                                \
    switch (DTYPE) {                                                                                   \
      case ::segred::DType::Float32: { using T = float; return __VA_ARGS__(); }                        \
      case ::segred::DType::Float64: { using T = double; return __VA_ARGS__(); }                       \
      case ::segred::DType::Float16: { using T = ::segred::half_t; return __VA_ARGS__(); }             \
      case ::segred::DType::BFloat16: { using T = ::segred::bfloat16_t; return __VA_ARGS__(); }        \
      default: throw ::segred::TypeError(::segred::detail::cat("unsupported data dtype ",              \
                                                             ::segred::dtype_name(DTYPE)));           \
    }                                                                                                  \
  }()

// SEGRED_DISPATCH_REDUCE(reduce, R, body): runs body with R bound to the ReduceOp functor template.
#define SEGRED_DISPATCH_REDUCE(REDUCE, OPT, ...)                                                       \
  [&] {                                                                                                \
    switch (REDUCE) {                                                                                  \
      case ::segred::Reduce::Sum: { using OPT = ::segred::ops::SumTag; return __VA_ARGS__(); }         \
      case ::segred::Reduce::Mean: { using OPT = ::segred::ops::SumTag; return __VA_ARGS__(); }        \
      case ::segred::Reduce::Max: { using OPT = ::segred::ops::MaxTag; return __VA_ARGS__(); }         \
      case ::segred::Reduce::Min: { using OPT = ::segred::ops::MinTag; return __VA_ARGS__(); }         \
      case ::segred::Reduce::Prod: { using OPT = ::segred::ops::ProdTag; return __VA_ARGS__(); }       \
    }                                                                                                  \
    throw ::segred::ValueError("reduce: unknown value");                                              \
  }()
