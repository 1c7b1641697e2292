// The path registry: every kernel path this build contains, listed once.
//
// Naming: <op>.<fwd|bwd>.<cpu|cuda>.<variant>.i<index bits>. Names are stable:
// tests, traces and reports refer to them. Adding a kernel path means adding
// its line here, a plan rule that can choose it, and a test that reaches it.
#include <mutex>

#include "segred/error.h"
#include "segred/trace.h"

namespace segred {

namespace {
using D = Direction;
using B = Backend;
const std::vector<PathInfo> kPaths = {
    // segment_reduce, CPU: "flat" = no feature dim (inner == 1, lane-parallel
    // accumulators); "features" = inner > 1 (vectorised across features).
    {"segment_reduce.fwd.cpu.flat.i64", "segment_reduce", D::Fwd, B::CPU, 64},
    {"segment_reduce.fwd.cpu.features.i64", "segment_reduce", D::Fwd, B::CPU, 64},
    {"segment_reduce.bwd.cpu.flat.i64", "segment_reduce", D::Bwd, B::CPU, 64},
    {"segment_reduce.bwd.cpu.features.i64", "segment_reduce", D::Bwd, B::CPU, 64},
};
}  // namespace

std::string_view to_string(Backend b) { return b == Backend::CPU ? "cpu" : "cuda"; }
std::string_view to_string(Direction d) { return d == Direction::Fwd ? "fwd" : "bwd"; }

const std::vector<PathInfo>& paths() { return kPaths; }

const PathInfo& path_info(std::string_view name) {
  for (const auto& p : kPaths)
    if (p.name == name) return p;
  throw ValueError(detail::cat("path: '", name, "' is not a registered path"));
}

}  // namespace segred
