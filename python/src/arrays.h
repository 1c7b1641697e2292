// Array exchange for the bindings: nanobind ndarray (DLPack / buffer protocol)
// <-> segred::TensorView without copies, and owning results back to Python.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "segred/segred.h"

namespace segred::py {
namespace nb = nanobind;

using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// View of an array; TypeError naming `arg` for a dtype segred does not know.
TensorView view_of(const InArray& a, const char* arg);
TensorView view_of(const OutArray& a, const char* arg);

// Hands an owning segred::Tensor to Python without a copy, as a DLPack-capable
// array on the tensor's device; python/segred wraps it into the caller's framework.
nb::object to_array(Tensor t);
// The same for CPU tensors, as a NumPy array.
nb::object to_numpy(Tensor t);

}  // namespace segred::py
