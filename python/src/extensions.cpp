// Bindings of the op families beyond segment_reduce; each family adds one call here.
#include <nanobind/nanobind.h>

namespace segred::py {
void bind_softmax(nanobind::module_& m);          // python/src/softmax_bindings.cpp
void bind_segment_softmax(nanobind::module_& m);  // python/src/segment_softmax_bindings.cpp

void bind_extensions(nanobind::module_& m) {
  bind_softmax(m);
  bind_segment_softmax(m);
}
}  // namespace segred::py
