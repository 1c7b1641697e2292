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
    // softmax family, CPU: "lastdim" = inner == 1 (rows contiguous); "spatial" =
    // inner > 1 (reduced values `inner` apart, loops along inner);
    // "spatial_stream" = the forward over a long D whose [D, W] tiles of exps
    // would not stay in L2 (whole slab rows streamed twice, no buffer). log_softmax
    // shares the kernels (another epilogue) but has its own names, so a trace
    // says which op ran and coverage proves both epilogues on both paths.
    {"softmax.fwd.cpu.lastdim.i64", "softmax", D::Fwd, B::CPU, 64},
    {"softmax.fwd.cpu.spatial.i64", "softmax", D::Fwd, B::CPU, 64},
    {"softmax.fwd.cpu.spatial_stream.i64", "softmax", D::Fwd, B::CPU, 64},
    {"softmax.bwd.cpu.lastdim.i64", "softmax", D::Bwd, B::CPU, 64},
    {"softmax.bwd.cpu.spatial.i64", "softmax", D::Bwd, B::CPU, 64},
    {"log_softmax.fwd.cpu.lastdim.i64", "log_softmax", D::Fwd, B::CPU, 64},
    {"log_softmax.fwd.cpu.spatial.i64", "log_softmax", D::Fwd, B::CPU, 64},
    {"log_softmax.fwd.cpu.spatial_stream.i64", "log_softmax", D::Fwd, B::CPU, 64},
    {"log_softmax.bwd.cpu.lastdim.i64", "log_softmax", D::Bwd, B::CPU, 64},
    {"log_softmax.bwd.cpu.spatial.i64", "log_softmax", D::Bwd, B::CPU, 64},
    // ragged softmax family, CPU: one task per (row, segment), online max/sum
    // merge along the segment, heads (inner) vectorised.
    {"segment_softmax.fwd.cpu.i64", "segment_softmax", D::Fwd, B::CPU, 64},
    {"segment_softmax.bwd.cpu.i64", "segment_softmax", D::Bwd, B::CPU, 64},
    {"segment_log_softmax.fwd.cpu.i64", "segment_log_softmax", D::Fwd, B::CPU, 64},
    {"segment_log_softmax.bwd.cpu.i64", "segment_log_softmax", D::Bwd, B::CPU, 64},
    {"segment_logsumexp.fwd.cpu.i64", "segment_logsumexp", D::Fwd, B::CPU, 64},
    {"segment_logsumexp.bwd.cpu.i64", "segment_logsumexp", D::Bwd, B::CPU, 64},
#ifdef SEGRED_WITH_CUDA
    // segment_reduce, CUDA (src/core/segment_geometry.h): merge-path tiles over
    // segment ends + positions; "flat" = inner == 1 (warp tiles staged in shared
    // memory), "features" = inner > 1 (lane groups, vectorised row loads);
    // i32 when every index the kernel forms is < 2^31. prod backward runs one
    // warp per segment (prefix and suffix products), 64-bit only.
    {"segment_reduce.fwd.cuda.flat.i32", "segment_reduce", D::Fwd, B::CUDA, 32},
    {"segment_reduce.fwd.cuda.flat.i64", "segment_reduce", D::Fwd, B::CUDA, 64},
    {"segment_reduce.fwd.cuda.features.i32", "segment_reduce", D::Fwd, B::CUDA, 32},
    {"segment_reduce.fwd.cuda.features.i64", "segment_reduce", D::Fwd, B::CUDA, 64},
    {"segment_reduce.bwd.cuda.flat.i32", "segment_reduce", D::Bwd, B::CUDA, 32},
    {"segment_reduce.bwd.cuda.flat.i64", "segment_reduce", D::Bwd, B::CUDA, 64},
    {"segment_reduce.bwd.cuda.features.i32", "segment_reduce", D::Bwd, B::CUDA, 32},
    {"segment_reduce.bwd.cuda.features.i64", "segment_reduce", D::Bwd, B::CUDA, 64},
    {"segment_reduce.bwd.cuda.prod_warp.i64", "segment_reduce", D::Bwd, B::CUDA, 64},
    // softmax family, CUDA (src/core/softmax_geometry.h): "lastdim_warp" = inner
    // == 1, short rows (a lane group per row, row in registers); "lastdim_block" =
    // inner == 1, longer rows (a block or a thread-block cluster per row);
    // "spatial" = inner > 1 ([D x column tile] per block or cluster, the tile in
    // registers); "spatial_staged" = inner > 1, long columns (session 5: the
    // block's slice of the column tile staged in shared memory by cp.async, a
    // cluster of up to 16 blocks over D; 2- and 4-byte types, vector loads).
    // i32 when 2*numel + 2^20 < 2^31 (spatial_staged: the same rule, its index
    // arithmetic stays below that bound too; softmax_geometry.h, "Index width").
    {"softmax.fwd.cuda.lastdim_warp.i32", "softmax", D::Fwd, B::CUDA, 32},
    {"softmax.fwd.cuda.lastdim_warp.i64", "softmax", D::Fwd, B::CUDA, 64},
    {"softmax.fwd.cuda.lastdim_block.i32", "softmax", D::Fwd, B::CUDA, 32},
    {"softmax.fwd.cuda.lastdim_block.i64", "softmax", D::Fwd, B::CUDA, 64},
    {"softmax.fwd.cuda.spatial.i32", "softmax", D::Fwd, B::CUDA, 32},
    {"softmax.fwd.cuda.spatial.i64", "softmax", D::Fwd, B::CUDA, 64},
    {"softmax.fwd.cuda.spatial_staged.i32", "softmax", D::Fwd, B::CUDA, 32},
    {"softmax.fwd.cuda.spatial_staged.i64", "softmax", D::Fwd, B::CUDA, 64},
    {"softmax.bwd.cuda.lastdim_warp.i32", "softmax", D::Bwd, B::CUDA, 32},
    {"softmax.bwd.cuda.lastdim_warp.i64", "softmax", D::Bwd, B::CUDA, 64},
    {"softmax.bwd.cuda.lastdim_block.i32", "softmax", D::Bwd, B::CUDA, 32},
    {"softmax.bwd.cuda.lastdim_block.i64", "softmax", D::Bwd, B::CUDA, 64},
    {"softmax.bwd.cuda.spatial.i32", "softmax", D::Bwd, B::CUDA, 32},
    {"softmax.bwd.cuda.spatial.i64", "softmax", D::Bwd, B::CUDA, 64},
    {"softmax.bwd.cuda.spatial_staged.i32", "softmax", D::Bwd, B::CUDA, 32},
    {"softmax.bwd.cuda.spatial_staged.i64", "softmax", D::Bwd, B::CUDA, 64},
    {"log_softmax.fwd.cuda.lastdim_warp.i32", "log_softmax", D::Fwd, B::CUDA, 32},
    {"log_softmax.fwd.cuda.lastdim_warp.i64", "log_softmax", D::Fwd, B::CUDA, 64},
    {"log_softmax.fwd.cuda.lastdim_block.i32", "log_softmax", D::Fwd, B::CUDA, 32},
    {"log_softmax.fwd.cuda.lastdim_block.i64", "log_softmax", D::Fwd, B::CUDA, 64},
    {"log_softmax.fwd.cuda.spatial.i32", "log_softmax", D::Fwd, B::CUDA, 32},
    {"log_softmax.fwd.cuda.spatial.i64", "log_softmax", D::Fwd, B::CUDA, 64},
    {"log_softmax.fwd.cuda.spatial_staged.i32", "log_softmax", D::Fwd, B::CUDA, 32},
    {"log_softmax.fwd.cuda.spatial_staged.i64", "log_softmax", D::Fwd, B::CUDA, 64},
    {"log_softmax.bwd.cuda.lastdim_warp.i32", "log_softmax", D::Bwd, B::CUDA, 32},
    {"log_softmax.bwd.cuda.lastdim_warp.i64", "log_softmax", D::Bwd, B::CUDA, 64},
    {"log_softmax.bwd.cuda.lastdim_block.i32", "log_softmax", D::Bwd, B::CUDA, 32},
    {"log_softmax.bwd.cuda.lastdim_block.i64", "log_softmax", D::Bwd, B::CUDA, 64},
    {"log_softmax.bwd.cuda.spatial.i32", "log_softmax", D::Bwd, B::CUDA, 32},
    {"log_softmax.bwd.cuda.spatial.i64", "log_softmax", D::Bwd, B::CUDA, 64},
    {"log_softmax.bwd.cuda.spatial_staged.i32", "log_softmax", D::Bwd, B::CUDA, 32},
    {"log_softmax.bwd.cuda.spatial_staged.i64", "log_softmax", D::Bwd, B::CUDA, 64},
    // ragged softmax family, CUDA (src/core/segment_softmax_geometry.h): merge-path
    // tiles staged in shared memory, chunk walks + block segmented scan, segments
    // crossing tiles completed by segment_reduce's fix-up and a crossing pass; i32
    // when every index the kernels form is < 2^31.
    {"segment_softmax.fwd.cuda.tiles.i32", "segment_softmax", D::Fwd, B::CUDA, 32},
    {"segment_softmax.fwd.cuda.tiles.i64", "segment_softmax", D::Fwd, B::CUDA, 64},
    {"segment_softmax.bwd.cuda.tiles.i32", "segment_softmax", D::Bwd, B::CUDA, 32},
    {"segment_softmax.bwd.cuda.tiles.i64", "segment_softmax", D::Bwd, B::CUDA, 64},
    {"segment_log_softmax.fwd.cuda.tiles.i32", "segment_log_softmax", D::Fwd, B::CUDA, 32},
    {"segment_log_softmax.fwd.cuda.tiles.i64", "segment_log_softmax", D::Fwd, B::CUDA, 64},
    {"segment_log_softmax.bwd.cuda.tiles.i32", "segment_log_softmax", D::Bwd, B::CUDA, 32},
    {"segment_log_softmax.bwd.cuda.tiles.i64", "segment_log_softmax", D::Bwd, B::CUDA, 64},
    {"segment_logsumexp.fwd.cuda.tiles.i32", "segment_logsumexp", D::Fwd, B::CUDA, 32},
    {"segment_logsumexp.fwd.cuda.tiles.i64", "segment_logsumexp", D::Fwd, B::CUDA, 64},
    {"segment_logsumexp.bwd.cuda.tiles.i32", "segment_logsumexp", D::Bwd, B::CUDA, 32},
    {"segment_logsumexp.bwd.cuda.tiles.i64", "segment_logsumexp", D::Bwd, B::CUDA, 64},
    // ragged softmax / log_softmax, CUDA, rows of 16 bytes x 2^k (session 44): segments binned
    // by length, short ones whole in the registers of a lane group, long ones in pieces
    // (src/cuda/segment_softmax_lanes.cuh); 64-bit element offsets, one variant.
    {"segment_softmax.fwd.cuda.lanes.i64", "segment_softmax", D::Fwd, B::CUDA, 64},
    {"segment_softmax.bwd.cuda.lanes.i64", "segment_softmax", D::Bwd, B::CUDA, 64},
    {"segment_log_softmax.fwd.cuda.lanes.i64", "segment_log_softmax", D::Fwd, B::CUDA, 64},
    {"segment_log_softmax.bwd.cuda.lanes.i64", "segment_log_softmax", D::Bwd, B::CUDA, 64},
#endif
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
