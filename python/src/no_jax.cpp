// Built instead of jax_ffi.cpp when jax was not importable at configure time.
#include <nanobind/nanobind.h>

namespace segred::py {
void bind_jax(nanobind::module_& m) { m.attr("jax_ffi_targets") = nanobind::none(); }
}  // namespace segred::py
