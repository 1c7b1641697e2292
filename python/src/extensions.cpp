// Bindings of the op families beyond segment_reduce; each family adds one call here.
#include <nanobind/nanobind.h>

namespace segred::py {
void bind_extensions(nanobind::module_& m) { (void)m; }
}  // namespace segred::py
