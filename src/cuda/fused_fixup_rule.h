// The rule of flat_reduce's fused fix-up (session 12), host- and device-callable
// and free of CUDA headers, so that a CPU test (tests/cpp/test_fused_fixup_rule.cpp)
// can replay every tile's publications and waits against a host partition of the
// merge space, in any order a GPU could run the tiles.
//
// Background (src/cuda/segment_kernels.cuh): a tile leaves a carry (the partial
// of the segment open at its end) and, when it completes a segment that began
// in an earlier tile, a head. Segment t owns the carries of tiles [w0, we),
//   w0 = first_carry_tile(t) = (t - 1 + q[t]) / items   (0 for t = 0),
//   we = first_carry_tile(t + 1)                        (the tile completing t),
// and it "crosses" when its head exists: q[t] < tile_j[we] (then w0 < we).
// Until session 11 a separate cooperative kernel (fixup_tree) combined them.
// Now the tiles publish and the completing tile finishes:
//   every tile publishes its carry: pub[w] = (1, value) in one 64-bit store
//     (flag and value arrive together: no fence);
//   short (n = we - w0 <= kFuseShort carries): the completing tile we waits for
//     pub[w0 .. we) and combines them in tile order, then its head: fixup_tree's
//     phase-1 order exactly;
//   long: the carries split into runs by aligned chunks of kFuseRun tiles; a
//     run's last tile waits for the run's carries, combines them (fixed order)
//     and publishes part[rs] (rs = the run's first tile); the completing tile
//     waits for the runs' parts, combines them (fixed order), then its head.
//   a crossing segment with at most kFuseReread positions before its completing
//     tile (the common case of short segments: every tile completes one) is not
//     waited for at all: that tile re-reads those positions from x (in L2: the
//     tile before read them just now), loads issued before its walk, and folds
//     them (fixed order) before its head.
// Every wait is on lower tiles, which the GPU starts no later (blocks are
// dispatched in index order, as CUB's single-pass scan also assumes): no
// cycle. pub and part are zeroed by prepare. A carry whose segment does not
// cross (n = 1 and the segment has no position before tile we, so no head) is
// published and never read; tile we finishes that segment itself, as before.
// Every order is a function of the shape only: bitwise reproducible.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define SEGRED_FUSE_HD __host__ __device__ __forceinline__
#else
#define SEGRED_FUSE_HD inline
#endif

namespace segred::cuda::fuse {

constexpr int kFuseShort = 64;     // carries up to which the completing tile reads them all
constexpr int kFuseReread = 32;    // positions before the completing tile it re-reads from x instead
constexpr int64_t kFuseRun = 256;  // tiles per aligned chunk of a long segment's runs

// First carry tile of segment t, from qt = q[t] (segment t starts at position qt).
template <class Idx>
SEGRED_FUSE_HD Idx first_carry_tile(Idx t, Idx qt, Idx items) {
  return t == 0 ? Idx(0) : Idx((t - 1 + qt) / items);
}

// True when the completing tile re-reads the `before` positions of its crossing
// segment that lie before it (q[t] to tile_j[we]) instead of waiting for carries.
template <class Idx>
SEGRED_FUSE_HD bool reread(Idx before) {
  return before <= Idx(kFuseReread);
}

template <class Idx>
SEGRED_FUSE_HD bool is_long(Idx w0, Idx we) {
  return we - w0 > Idx(kFuseShort);
}

// Runs of a long segment with carries [w0, we).
template <class Idx>
SEGRED_FUSE_HD Idx runs(Idx w0, Idx we) {
  return Idx((we - 1) / Idx(kFuseRun) - w0 / Idx(kFuseRun) + 1);
}

// The run [rs, re) of carry tile p (w0 <= p < we) of a long segment.
template <class Idx>
SEGRED_FUSE_HD void run_of(Idx p, Idx w0, Idx we, Idx& rs, Idx& re) {
  const Idx c0 = Idx(p / Idx(kFuseRun) * Idx(kFuseRun));
  rs = c0 > w0 ? c0 : w0;
  re = c0 + Idx(kFuseRun) < we ? Idx(c0 + Idx(kFuseRun)) : we;
}

// The first tile of run m (m = 0 .. runs - 1): where its part is published.
template <class Idx>
SEGRED_FUSE_HD Idx run_slot(Idx m, Idx w0) {
  return m == 0 ? w0 : Idx((w0 / Idx(kFuseRun) + m) * Idx(kFuseRun));
}

}  // namespace segred::cuda::fuse
