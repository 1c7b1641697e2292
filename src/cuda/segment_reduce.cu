// segment_reduce on CUDA: metadata on the device -> the merge space q and the
// tile partition (one cooperative "prepare" kernel), strided inputs ->
// contiguous copies, then the (dtype, index width) instantiation.
//
// Metadata validation (SEMANTICS.md). unsafe = false: the metadata is copied to
// the host (one cudaMemcpy and a stream synchronisation: the documented cost of
// validation) and checked by the CPU backend's own normalise_offsets, so the
// rules and messages are the same on every backend. Either way q is then built
// on the device from the raw metadata by prepare, which reproduces the host
// clamping exactly (lengths: saturating running sum of clamp(len, 0, L);
// offsets: running max of clamp(off, 0, L), which equals the CPU's
// o[i+1] = clamp(in[i+1], o[i], L)), so every segment lies in [0, L] whatever the
// metadata holds; for validated metadata the clamp changes nothing.
//
// prepare (cooperative launch, grid-stride, any grid size; phases separated by
// grid.sync). Session 5 split it into three ordinary launches (prep_q, a CUB
// decoupled-lookback scan, prep_partition; commit 0934b64); session 6 measured
// the two side by side on the H200 (tools/gpu-ab, bench/NOTES.md): the same GPU
// time or less for this kernel on every case (1d_2Mx32 fp32 sum fwd as a CUDA
// graph 148.8 us here vs 153.7 split; ncu: 7.6 us vs 2.98 + 2.30 + 2.74 on 4k x
// 16), and 5-9 us more per call timed alone for the split one (a memset and two
// more launches the idle GPU waits for). So this one launch is back:
//   0. offsets only (v5): the scan blocks write q = row base + clamped offset
//      directly and flag any drop of the clamped offsets within a row; after one
//      grid.sync, if no block raised its flag, q is the running max already and
//      the partition (3), searched beside this pass, stands; otherwise (invalid
//      metadata, unsafe mode) 1-2 rebuild all of q. Lengths always take 1-2.
//   1. the first `scan blocks` each reduce a contiguous range of the metadata
//      items (row-major, outer x k) with the segmented operator ScanOp: their
//      aggregates;
//   2. each of them scans its range again, starting from the reduction of the
//      earlier blocks' aggregates, and writes q directly (row bases added, ghost
//      entries included); lengths rows get their leading 0; q[0], q[U] and the
//      fix-up counter are set;
//   3. the W + 1 tile boundaries of the merge space (partition_tile), when the
//      call has tiles (every path but the prod backward). Offsets without a
//      drop (session 15) search the raw offsets (RawEnds: L1-cached, where q
//      must be read from L2) in phase 0 already, beside the scanning blocks'
//      loads instead of behind them and the grid.sync; lengths and drops search
//      q after the scan.
// All of it is integer arithmetic: any bracketing of the operator gives the
// same q, so the result is deterministic.
#include <cooperative_groups.h>

#include <vector>

#include "src/core/device_memory.h"
#include "src/core/segment_geometry.h"
#include "src/cuda/kernels.h"
#include "src/cuda/merge_space.cuh"
#include "src/cuda/merge_space_probe.h"
#include "segred/stream.h"
#include "src/cuda/segment_reduce_impl.cuh"

namespace segred::cuda {

// Defined in segment_reduce_{fwd,bwd}_<dtype>.cu.
extern template void run_fwd<float, int32_t>(const FwdArgs&);
extern template void run_fwd<float, int64_t>(const FwdArgs&);
extern template void run_bwd<float, int32_t>(const BwdArgs&);
extern template void run_bwd<float, int64_t>(const BwdArgs&);
extern template void run_fwd<double, int32_t>(const FwdArgs&);
extern template void run_fwd<double, int64_t>(const FwdArgs&);
extern template void run_bwd<double, int32_t>(const BwdArgs&);
extern template void run_bwd<double, int64_t>(const BwdArgs&);
extern template void run_fwd<half_t, int32_t>(const FwdArgs&);
extern template void run_fwd<half_t, int64_t>(const FwdArgs&);
extern template void run_bwd<half_t, int32_t>(const BwdArgs&);
extern template void run_bwd<half_t, int64_t>(const BwdArgs&);
extern template void run_fwd<bfloat16_t, int32_t>(const FwdArgs&);
extern template void run_fwd<bfloat16_t, int64_t>(const FwdArgs&);
extern template void run_bwd<bfloat16_t, int32_t>(const BwdArgs&);
extern template void run_bwd<bfloat16_t, int64_t>(const BwdArgs&);

namespace {

constexpr int kMaxDims = 8;

struct Strided {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

Strided strided_of(const char* op, const char* name, const TensorView& t) {
  SEGRED_CHECK(t.ndim() <= kMaxDims, ValueError, op, ": ", name, " has ", t.ndim(), " dims; the CUDA backend supports up to ",
               kMaxDims);
  Strided s;
  s.nd = int(t.ndim());
  for (int d = 0; d < s.nd; ++d) {
    s.sizes[d] = t.sizes[size_t(d)];
    s.strides[d] = t.strides[size_t(d)];
  }
  return s;
}

// Metadata element (row r of the leading dims, column c), any strides.
struct MetaReader {
  const void* p;
  bool i32;
  Strided st;
  __host__ __device__ int64_t read(int64_t r, int64_t c) const {
    const int64_t off = offset(r, c);
    return i32 ? int64_t(static_cast<const int32_t*>(p)[off]) : static_cast<const int64_t*>(p)[off];
  }
  // The same element through the read-only data path (the metadata is never
  // written during a call): repeated reads of one line by a block hit L1.
  __device__ int64_t ldg(int64_t r, int64_t c) const {
    const int64_t off = offset(r, c);
    return i32 ? int64_t(__ldg(static_cast<const int32_t*>(p) + off)) : __ldg(static_cast<const int64_t*>(p) + off);
  }
  __host__ __device__ int64_t offset(int64_t r, int64_t c) const {
    int64_t off = c * st.strides[st.nd - 1];
    if (st.nd > 1) off += row_offset(r);
    return off;
  }
  // Batched metadata: the offset of row r of the leading dims. Rolled, and only
  // for nd > 1: unrolled at every read it put ~2 x 8 64-bit divisions of code per
  // read site into prepare, most of its 160 KB of SASS, which one scanning block
  // runs cold while the grid waits (session 8, bench/NOTES.md).
  __host__ __device__ int64_t row_offset(int64_t r) const {
    int64_t off = 0;
#pragma unroll 1
    for (int d = st.nd - 2; d >= 0; --d) {
      const int64_t i = r % st.sizes[d];
      r /= st.sizes[d];
      off += i * st.strides[d];
    }
    return off;
  }
};

// Scan element: (row, clamped value); row -1 is the empty element, a two-sided
// identity (padding of partial tiles, blocks without items).
struct KV {
  int64_t k, v;
};

// Segmented (by row) operator: within a row, saturating sum (lengths) or max
// (offsets) of values in [0, L]; a new row restarts. Associative on sequences
// whose rows do not decrease (the metadata in row-major order).
struct ScanOp {
  int64_t L;
  bool sum;
  __host__ __device__ KV operator()(const KV& a, const KV& b) const {
    if (b.k < 0) return a;
    if (a.k != b.k) return b;
    const int64_t v = sum ? (a.v + b.v < L ? a.v + b.v : L) : (a.v > b.v ? a.v : b.v);
    return KV{b.k, v};
  }
};

constexpr int kPrepBlock = 256;
constexpr int kPrepIpt = 4;                              // items per thread per round of phase 0
constexpr int64_t kPrepTile = kPrepBlock * kPrepIpt;     // items per block and round of phase 0
// Scan blocks get ~kPrepTile metadata items each where the cooperative grid holds
// enough blocks (v4 took 4 tiles per block): phase 0 is then one round of loads
// per block, and the warp walk of phases 1-2 ~1 group of kPrepSteps steps per warp.
constexpr int64_t kPrepItemsPerBlock = kPrepTile;        // target metadata items per scan block
constexpr int kPrepWarps = kPrepBlock / 32;
constexpr int kPrepSteps = 4;  // warp steps of 32 items whose loads are in flight together (phases 1-2)

template <class Idx>
struct PrepArgs {
  MetaReader m;                  // raw lengths or offsets, any strides
  int64_t outer = 0, S = 0, L = 0, k = 0;  // k: metadata entries per row (S or S + 1)
  bool lengths = false;
  int64_t scan_target = 0;       // scan blocks wanted (agg has room for them)
  KV* agg = nullptr;             // scan_target aggregates
  int* flags = nullptr;          // scan_target drop flags (offsets' speculative pass)
  Idx* q = nullptr;              // outer * (S + 1) + 2 entries
  int64_t W = -1, items = 0;     // tiles and merge items per tile; W < 0: no partition
  Idx nseg = 0, nel = 0;         // U and N of the merge space
  Idx* tile_i = nullptr;
  Idx* tile_j = nullptr;
  unsigned* long_count = nullptr;
  unsigned long long* fuse_pub = nullptr;  // flat_reduce's fused fix-up slots, zeroed here
  int64_t fuse_n = 0;
  int spec = 0;                  // offsets' partition (SegmentTestCaps::prep_spec): 0 from the raw offsets
                                 // before the grid.sync, 1 the rule below, 2 from q after it, 3 raw after,
                                 // 4 scattered by the segments (session 33, below)
  Idx* srec = nullptr;           // spec 4: kScatterRecs records (v, wa, wb) per scan block
};

// Session 33, prep_spec 4: the partition scattered by the segments instead of
// searched by the boundaries. The end item of merge-space segment v sits at merge
// index e_v = ends[v] + v (strictly increasing), and a boundary d = w * items
// splits at i = #{v : e_v < d} (merge_search's answer: its predicate ends[m] <=
// d - m - 1 is e_m < d). So the boundaries with d in (e_{v-1}, e_v] are exactly
// those with i = v, j = d - v: the thread that holds offsets v - 1 and v in
// registers (phase 0 loads them anyway) writes them, without a dependent search
// (a search is a chain of global loads: ~17 on 1d_200k_exp40, whose searching
// blocks the whole grid then waits for at the grid.sync; ncu source counters,
// bench/NOTES.md session 33). A segment holding more than kScatterWrites
// boundaries leaves a record (v, first boundary left, last) that the whole grid
// writes after the grid.sync; more than kScatterRecs records in a block, or more
// than kScatterBlocks blocks with records, and the call takes spec 3's search from
// the raw offsets after the sync instead (same tiles). Offsets that drop go to the
// scan as before, which redoes the partition from q.
constexpr int kScatterWrites = 16;
static_assert(kScatterWrites == detail::kScatterLongTiles && kPrepTile == detail::kScatterRoundItems,
              "prep_scatter_rule's constants are prepare's");
constexpr int kScatterRecs = 64;
constexpr int kScatterBlocks = 64;

// The segment ends of the merge space read from the raw offsets: ends[v] = q[v + 1]
// as the speculative pass writes it (row base + clamped offset; the last entry
// outer * L), which is q itself when no clamped offset drops within a row. So the
// partition can search these before q is written and before the grid.sync that
// tells whether a drop exists; a drop sends the call to the scan and the partition
// is redone from q. Loads take the read-only path: the upper probes of the tiles'
// searches are shared by a block's threads and hit L1, where q (written in this
// kernel) must be read from L2.
// It refers to the kernel's argument: a copy of the reader's strides would be
// indexed at run time from local memory.
struct RawEnds {
  const MetaReader* m;
  int64_t outer, k, L;  // k = S + 1 offsets per row
  __device__ int64_t operator[](int64_t v) const {
    if (v >= outer * k) return outer * L;
    const int64_t r = outer == 1 ? 0 : v / k;
    const int64_t x = m->ldg(r, v - r * k);
    return r * L + (x < 0 ? 0 : (x > L ? L : x));
  }
};
// After the grid.sync: the raw offsets (no drop) or q itself (lengths, drops).
template <class Idx>
struct EndsAfterSync {
  RawEnds raw;
  const Idx* q;
  bool from_raw;
  __device__ int64_t operator[](int64_t v) const { return from_raw ? raw[v] : int64_t(__ldcg(q + v + 1)); }
};
// q[t] from the ends: q[0] = 0, q[t] = ends[t - 1].
template <class Ends>
struct StartsOf {
  Ends e;
  __device__ int64_t operator[](int64_t t) const { return t == 0 ? 0 : int64_t(e[t - 1]); }
};

// Phase 3 for this thread's boundaries w = gtid, gtid + gstride, ... <= W: the
// merge-path split of each (partition_tile) from the ends q1 (q1[v] = q[v + 1]),
// and whether the segment t open at boundary w may be a long crossing segment:
// its carries start in tile w0 (the end of segment t - 1) and it completes in tile
// we (its own end); fixup_tree lists it when we - w0 > kShortFix. Every crossing
// segment is open at some boundary, so no "long" anywhere proves fixup_tree's
// phase 1 lists none (it then returns without its grid.sync). One tile of slack:
// it may only say "long" too often, which costs the grid.sync and nothing else.
template <class Idx, class Q1, class Q0>
__device__ bool partition_tiles(const PrepArgs<Idx>& a, const Q1& q1, const Q0& q0, int64_t gtid, int64_t gstride) {
  bool long_seg = false;
  for (int64_t w = gtid; w <= a.W; w += gstride) {
    partition_tile(q1, a.nseg, a.nel, w, a.items, a.tile_i, a.tile_j);
    const Idx t = a.tile_i[w];
    if (a.long_count && t < a.nseg) {
      const int64_t w0 = t == 0 ? 0 : (int64_t(t) - 1 + int64_t(q0[t])) / a.items;
      const int64_t we = (int64_t(t) + int64_t(q0[t + 1])) / a.items;
      long_seg |= we - w0 >= kShortFix;
    }
  }
  return long_seg;
}

// Scatter: the instantiation of prep_spec 4 (the host launches it for spec 4 only), so
// that the searching forms keep their registers (session 33: with the scatter's code in
// the same instantiation they spilled 84-88 bytes instead of 24-48, and their rows ran
// 0.6-1.6% slower).
template <class Idx, bool Scatter>
__global__ void __launch_bounds__(kPrepBlock, 4) prepare(PrepArgs<Idx> a) {
  __shared__ KV s_wagg[kPrepWarps];  // pass 0's warp aggregates, read again in pass 1
  __shared__ KV s_pre[kPrepWarps];   // pass 1: the warps' folds of the earlier blocks' aggregates
  __shared__ int s_nrec, s_nlblk;    // spec 4: this block's records; blocks with records (after the sync)
  __shared__ int s_lblk[Scatter ? kScatterBlocks : 1];
  __shared__ int s_rpre[Scatter ? kScatterBlocks + 1 : 1];  // after the sync: the listed blocks' records, prefix sums
  __shared__ Idx s_rec[Scatter ? 3 * kPrepBlock : 1];       // after the sync: one record a thread, read by the block
  const ScanOp op{a.L, a.lengths};
  const KV empty{-1, 0};
  const int tid = int(threadIdx.x);
  const int64_t b = blockIdx.x;
  const int64_t gtid = b * kPrepBlock + tid, gstride = int64_t(gridDim.x) * kPrepBlock;
  const int64_t items = a.outer * a.k;
  const int64_t nscan = items > 0 ? (a.scan_target < gridDim.x ? a.scan_target : int64_t(gridDim.x)) : 0;
  const int64_t per = nscan > 0 ? (items + nscan - 1) / nscan : 0;
  const int64_t lo = b * per, hi = lo + per < items ? lo + per : items;
  const bool scanning = b < nscan;
  const int64_t lead = a.lengths ? 2 : 1;  // lengths entry c is the end of segment c
  auto clampv = [&](int64_t v) { return v < 0 ? int64_t(0) : (v > a.L ? a.L : v); };
  // Blocked tile of metadata items [base, base + kPrepTile) within [lo, hi).
  auto load = [&](int64_t base, KV (&x)[kPrepIpt]) {
    const int64_t idx = base + tid * kPrepIpt;
    int64_t r = idx / a.k, c = idx - r * a.k;  // one division per thread; k >= 1 when there are items
#pragma unroll
    for (int i = 0; i < kPrepIpt; ++i) {
      if (idx + i < hi) {
        x[i] = KV{r, clampv(a.m.read(r, c))};
      } else {
        x[i] = empty;
      }
      if (++c == a.k) {
        c = 0;
        ++r;
      }
    }
  };
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  allow_dependents();  // the main kernel may be scheduled now; it waits for this grid's end (wait_prior_grid)
  // Entries no scan writes: q[0], q[U], the lengths rows' leading 0, the counter.
  if (a.lengths)
    for (int64_t r = gtid; r < a.outer; r += gstride) a.q[1 + r * (a.S + 1)] = Idx(r * a.L);
  for (int64_t i = gtid; i < a.fuse_n; i += gstride) a.fuse_pub[i] = 0ull;
  if (gtid == 0) {
    a.q[0] = 0;
    a.q[a.outer * (a.S + 1) + 1] = Idx(a.outer * a.L);
    if (a.long_count) a.long_count[0] = a.long_count[1] = a.long_count[2] = 0;
  }
  bool need_scan = a.lengths;
  bool raw_after = false;  // the partition (3) from the raw offsets: offsets without a drop
  if (!a.lengths) {
    // spec 4 (session 33): the partition scattered by the segments (kScatterWrites above).
    const bool scatter = Scatter && a.W >= 0 && nscan > 0;
    bool scat_long = false;
    if (scatter) {
      if (tid == 0) s_nrec = s_nlblk = 0;
      __syncthreads();  // uniform: nscan and a.spec are the grid's
    }
    // floor(e / items) for e >= -1 without a 64-bit division: the double quotient is
    // within 1 of it for e < 2^52, and one step corrects it.
    const double inv_items = a.items > 0 ? 1.0 / double(a.items) : 0.0;
    auto floor_items = [&](int64_t e) {
      if (e < 0) return int64_t(-1);
      int64_t f = int64_t(double(e) * inv_items);
      if (f * a.items > e)
        --f;
      else if ((f + 1) * a.items <= e)
        ++f;
      return f;
    };
    // Boundary w (d = w items) inside segment v: split at i = v, j = d - v.
    auto put_tile = [&](int64_t w, int64_t v) {
      a.tile_i[w] = Idx(v);
      a.tile_j[w] = Idx(w * a.items - v);
    };
    // Boundaries w in (f, e / items] of segment v, whose end item is at merge
    // index e; f: the last boundary before it (floor(e_{v-1} / items), -1 for v = 0).
    auto scatter_seg = [&](int64_t v, int64_t e, int64_t& f) {
      int64_t w = f + 1;
      for (int n = 0; n < kScatterWrites && w < a.W && w * a.items <= e; ++n, ++w) put_tile(w, v);
      int64_t fn = w - 1;
      if (w < a.W && w * a.items <= e) {  // the rest after the grid.sync
        fn = floor_items(e);
        if (fn > a.W - 1) fn = a.W - 1;
        const int s = atomicAdd(&s_nrec, 1);
        if (s < kScatterRecs) {
          Idx* r = a.srec + 3 * (b * kScatterRecs + s);
          r[0] = Idx(v);
          r[1] = Idx(w);
          r[2] = Idx(fn);
        }
      }
      // partition_tiles' long test for the segment open at these boundaries:
      // its carries from tile max(f, 0) (= (v - 1 + q[v]) / items), its end in tile fn.
      if (fn > f && a.long_count && fn - (f > 0 ? f : 0) >= kShortFix) scat_long = true;
      if (fn > f) f = fn;
    };
    // 0. Offsets, speculative: q = row base + clamped offset, which is the
    // running max when the clamped offsets do not drop within a row; a block
    // that sees a drop (the item before its range included) raises its flag.
    int drop = 0;
    if (scanning) {
      for (int64_t base = lo; base < hi; base += kPrepTile) {
        KV x[kPrepIpt];
        load(base, x);
        const int64_t idx0 = base + tid * kPrepIpt;
        int64_t ep = -1;  // spec 4: the merge index of the end item before idx0 (none for idx0 = 0)
        if (idx0 < hi) {
          const int64_t r0 = idx0 / a.k, c0 = idx0 - r0 * a.k;
          if (c0 > 0 || (scatter && r0 > 0)) {  // the item before (in the row before when c0 = 0)
            const int64_t rp = c0 > 0 ? r0 : r0 - 1;
            const int64_t vp = clampv(a.m.read(rp, c0 > 0 ? c0 - 1 : a.k - 1));
            if (c0 > 0 && vp > x[0].v) drop = 1;
            ep = rp * a.L + vp + idx0 - 1;
          }
        }
#pragma unroll
        for (int i = 0; i < kPrepIpt; ++i) {
          if (x[i].k < 0) continue;
          if (i > 0 && x[i - 1].k == x[i].k && x[i - 1].v > x[i].v) drop = 1;
          const int64_t idx = idx0 + i;
          a.q[lead + x[i].k * (a.S + 1) + (idx - x[i].k * a.k)] = Idx(x[i].k * a.L + x[i].v);
        }
        if (scatter && idx0 < hi) {
          int64_t f = floor_items(ep);
#pragma unroll
          for (int i = 0; i < kPrepIpt; ++i)
            if (x[i].k >= 0) scatter_seg(idx0 + i, x[i].k * a.L + x[i].v + idx0 + i, f);
          if (idx0 <= items - 1 && items - 1 < idx0 + kPrepIpt) {
            // The last metadata item's thread: the tail segment v = items (ends = outer L,
            // so e = N + U - 1), then the boundaries at the merge space's end (d = U + N).
            scatter_seg(items, int64_t(a.nel) + int64_t(a.nseg) - 1, f);
            for (int64_t w = f + 1; w <= a.W; ++w) {
              a.tile_i[w] = a.nseg;
              a.tile_j[w] = a.nel;
            }
          }
        }
      }
    }
    // 0b. The partition (3) from the raw offsets (RawEnds), in this phase: it
    // waits neither for q nor for the grid.sync, and the verdict on the drops
    // below keeps it or sends the call to the scan, which redoes it from q.
    // H200, session 15 (bench/NOTES.md), against the search from q after the sync:
    // 1d_64x1M -3 to -6 us (one block scans, the rest only waited), 1d_one2^26_1Mx1
    // -25 us fp32 (its tiles' shared probes hit L1), 1d_200k_exp40 +1 to +3 us
    // (196 blocks, all scanning: the order cannot gain there). The rule (spec 1)
    // searches here only when most blocks have nothing to scan (2 nscan <= grid),
    // else after the sync from the raw offsets; it is tested but not yet timed,
    // so it is not the default.
    const bool spec = a.W >= 0 && (a.spec == 0 || (a.spec == 1 && 2 * nscan <= int64_t(gridDim.x)));
    bool spec_long = false;
    if (spec) {
      const RawEnds e{&a.m, a.outer, a.k, a.L};
      spec_long = partition_tiles(a, e, StartsOf<RawEnds>{e}, gtid, gstride);
    }
    drop = __syncthreads_or(drop);
    // flags[b]: bit 0 a drop; spec 4: above it the block's records (kScatterRecs + 1: too many)
    if (scanning && tid == 0)
      a.flags[b] = drop | (scatter ? (s_nrec < kScatterRecs + 1 ? s_nrec : kScatterRecs + 1) << 1 : 0);
    grid.sync();
    int any = 0, ovf = 0;
    for (int64_t j = tid; j < nscan; j += kPrepBlock) {
      const int fl = __ldcg(a.flags + j);
      any |= fl & 1;
      if (scatter && (fl >> 1) > kScatterRecs) {
        ovf = 1;
      } else if (scatter && (fl >> 1) > 0) {
        const int s = atomicAdd(&s_nlblk, 1);
        if (s < kScatterBlocks)
          s_lblk[s] = int(j);
        else
          ovf = 1;
      }
    }
    need_scan = __syncthreads_or(any) != 0;  // the same in every block
    // No drop: the speculative tiles are the partition of q. The long flag is
    // written after the grid.sync, so thread 0's zeroing above cannot undo it.
    if (spec && !need_scan) {
      if (spec_long) a.long_count[1] = 1;  // every writer writes 1
      return;
    }
    const bool scat_ovf = scatter && __syncthreads_or(ovf) != 0;
    if (scatter && gtid == 0 && !need_scan)  // the form taken, for the tests (MergeSpaceProbe)
      a.long_count[2] = scat_ovf ? 3u : s_nlblk > 0 ? 2u : 1u;
    if (scatter && !scat_ovf && !need_scan) {
      // The long segments' boundaries, over the grid (any order: each w is written once).
      // The records are read by the block, one a thread, into shared memory (read one
      // after another, their loads were a chain of L2 round trips: 64 records took
      // 1d_64x1M's prepare from 11 to 71 us, session 33 run 3).
      const int nl = s_nlblk < kScatterBlocks ? s_nlblk : kScatterBlocks;
      if (tid < nl) s_rpre[tid + 1] = __ldcg(a.flags + s_lblk[tid]) >> 1;
      __syncthreads();
      if (tid == 0) {
        s_rpre[0] = 0;
        for (int l = 0; l < nl; ++l) s_rpre[l + 1] += s_rpre[l];
      }
      __syncthreads();
      const int nrec = s_rpre[nl];
      for (int r0 = 0; r0 < nrec; r0 += kPrepBlock) {
        const int r = r0 + tid;
        if (r < nrec) {
          int l = 0;
          while (s_rpre[l + 1] <= r) ++l;  // nl <= kScatterBlocks
          const Idx* rec = a.srec + 3 * (int64_t(s_lblk[l]) * kScatterRecs + (r - s_rpre[l]));
#pragma unroll
          for (int u = 0; u < 3; ++u) s_rec[3 * tid + u] = __ldcg(rec + u);
        }
        __syncthreads();
        const int n = nrec - r0 < kPrepBlock ? nrec - r0 : kPrepBlock;
        for (int k = 0; k < n; ++k) {
          const int64_t v = s_rec[3 * k], wa = s_rec[3 * k + 1], wb = s_rec[3 * k + 2];
          for (int64_t w = wa + gtid; w <= wb; w += gstride) put_tile(w, v);
        }
        __syncthreads();
      }
      if (scat_long) a.long_count[1] = 1;  // every writer writes 1
      return;
    }
    raw_after = !need_scan && (a.spec == 1 || a.spec == 3 || a.spec == 4);
  }
  if (need_scan) {
    // Phases 1-2 are two passes of one loop over the block's range, cut into 8
    // contiguous warp ranges and walked in steps of 32 items (lane l on item
    // base + l: coalesced loads and q stores), kPrepSteps steps' loads in flight,
    // a 5-step shuffle scan per step, the warp's running prefix carried from step
    // to step: no block barrier inside the walk. Pass 0 leaves the warp
    // aggregates in s_wagg and the block's in agg[b]; pass 1 starts each warp
    // from the earlier blocks' and warps' aggregates and writes q.
    // Why this shape (ncu source counters, session 8, bench/NOTES.md): v6 scanned
    // 1024-item block tiles with cub::BlockScan of 16-byte pairs (8 dependent
    // rounds per phase on 2M lengths, two barriers each); and with few lengths the
    // call's cost is one block running cold code while the grid waits at the
    // grid.sync (instruction-cache misses: 12k SASS lines, each phase its own
    // inlined copy), so the walk is written once, compact, and run twice.
    const int lane = tid & 31, wid = tid >> 5;
    const int64_t wper = per > 0 ? (per + kPrepWarps - 1) / kPrepWarps : 0;
    const int64_t wlo = lo + wid * wper;
    const int64_t whi = wlo + wper < hi ? wlo + wper : hi;  // wlo >= whi: an empty warp range
    auto warp_scan = [&](KV x) {  // inclusive, in lane order; no divergent branch around the shuffles
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const KV y{__shfl_up_sync(0xffffffffu, x.k, off), __shfl_up_sync(0xffffffffu, x.v, off)};
        const KV z = op(y, x);
        x.k = lane >= off ? z.k : x.k;
        x.v = lane >= off ? z.v : x.v;
      }
      return x;
    };
    auto last = [&](const KV& x) { return KV{__shfl_sync(0xffffffffu, x.k, 31), __shfl_sync(0xffffffffu, x.v, 31)}; };
#pragma unroll 1
    for (int pass = 0; pass < 2; ++pass) {
      if (scanning) {
        KV pre = empty;  // pass 0: the warp's aggregate so far; pass 1: the prefix of the next item
        if (pass == 1) {
          // The earlier blocks' aggregates agg[0, b), folded in order by the whole
          // block: thread t its contiguous chunk (all loads in flight), then a warp
          // scan and the 8 warp totals in order. (A warp-serial fold over b / 32
          // steps of aggregates measured ~10-17 us on 528 scan blocks, session 8.)
          const int64_t C = (b + kPrepBlock - 1) / kPrepBlock;
          KV t = empty;
#pragma unroll 1
          for (int64_t j0 = int64_t(tid) * C; j0 < int64_t(tid + 1) * C && j0 < b; j0 += 4) {
            KV v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const int64_t j = j0 + u;
              v[u] = j < int64_t(tid + 1) * C && j < b ? KV{__ldcg(&a.agg[j].k), __ldcg(&a.agg[j].v)} : empty;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) t = op(t, v[u]);
          }
          t = last(warp_scan(t));
          if (lane == 0) s_pre[wid] = t;
          __syncthreads();
          for (int w2 = 0; w2 < kPrepWarps; ++w2) pre = op(pre, s_pre[w2]);
          for (int w2 = 0; w2 < wid; ++w2) pre = op(pre, s_wagg[w2]);
        }
#pragma unroll 1
        for (int64_t base = wlo; base < whi; base += 32 * kPrepSteps) {
          const int64_t idx0 = base + lane;
          int64_t r = 0, c = idx0;  // one row: no division
          if (a.outer > 1) {
            r = idx0 / a.k;
            c = idx0 - r * a.k;
          }
          KV x[kPrepSteps];
          int64_t cs[kPrepSteps];
#pragma unroll
          for (int st = 0; st < kPrepSteps; ++st) {
            cs[st] = c;
            x[st] = idx0 + 32 * st < whi ? KV{r, clampv(a.m.read(r, c))} : empty;
            c += 32;
            if (a.outer > 1)  // one row: c never reaches k inside the range
              while (c >= a.k) {  // at most once for rows of >= 32 entries; no division inlined per step
                c -= a.k;
                ++r;
              }
          }
#pragma unroll
          for (int st = 0; st < kPrepSteps; ++st) {
            const KV inc = warp_scan(x[st]);
            if (pass == 1 && x[st].k >= 0) {
              const KV y = op(pre, inc);  // y.k = x[st].k, this item's row
              a.q[lead + y.k * (a.S + 1) + cs[st]] = Idx(y.k * a.L + y.v);
            }
            pre = op(pre, last(inc));
          }
        }
        if (pass == 0) {
          if (lane == 0) s_wagg[wid] = pre;
          __syncthreads();
          if (tid == 0) {
            KV t = empty;
            for (int w2 = 0; w2 < kPrepWarps; ++w2) t = op(t, s_wagg[w2]);
            a.agg[b] = t;
          }
        }
      }
      if (pass == 1 && a.W < 0) return;  // uniform over the grid: no grid.sync follows
      // Between the passes only agg[] crosses blocks: one scanning block needs its
      // own __syncthreads (above) and no grid.sync (nscan is the same everywhere).
      if (pass == 1 || nscan > 1) grid.sync();
    }
  } else if (a.W < 0) {
    return;
  }
  // 3. partition (q is complete: the speculative pass and one grid.sync, or the
  // scan), from the raw offsets when they did not drop, else from q.
  const EndsAfterSync<Idx> e{RawEnds{&a.m, a.outer, a.k, a.L}, a.q, raw_after};
  if (partition_tiles(a, e, StartsOf<EndsAfterSync<Idx>>{e}, gtid, gstride))
    a.long_count[1] = 1;  // every writer writes 1
}

template <int ES>
struct Word;
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint64_t; };

template <class W>
__global__ void strided_copy(W* dst, const W* src, int64_t n, Strided st) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= n) return;
  int64_t rem = id, off = 0;
  for (int d = st.nd - 1; d >= 0; --d) {
    const int64_t i = rem % st.sizes[d];
    rem /= st.sizes[d];
    off += i * st.strides[d];
  }
  dst[id] = src[off];
}

struct DeviceGuard {
  int prev = 0, dev = 0;
  explicit DeviceGuard(int d) : dev(d) {
    cudaGetDevice(&prev);
    if (prev != dev) SEGRED_CUDA_CHECK(cudaSetDevice(dev), "segment_reduce: cudaSetDevice");
  }
  ~DeviceGuard() {
    if (prev != dev) cudaSetDevice(prev);
  }
};

// The contiguous form of a device tensor: itself or a copy in scratch.
const void* contiguous(const char* op, const char* name, const TensorView& t, Scratch& scratch, cudaStream_t s) {
  if (t.is_contiguous() || t.numel() == 0) return t.data;
  const Strided st = strided_of(op, name, t);
  const int64_t n = t.numel();
  const int es = dtype_size(t.dtype);
  void* dst = scratch.alloc<char>(n * es);
  const int block = 256;
  const unsigned grid = unsigned(detail::ceil_div(n, block));
  switch (es) {
    case 2: strided_copy<<<grid, block, 0, s>>>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(t.data), n, st); break;
    case 4: strided_copy<<<grid, block, 0, s>>>(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(t.data), n, st); break;
    default: strided_copy<<<grid, block, 0, s>>>(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(t.data), n, st); break;
  }
  check_launch("strided_copy");
  return dst;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Validates device metadata on the host (unsafe = false); fills lay.offsets.
void validate_on_host(const char* op, detail::SegmentLayout& lay, const Segments& seg, cudaStream_t s) {
  const bool use_lengths = seg.lengths.has_value();
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  std::vector<char> buf;
  const int es = dtype_size(m.dtype);
  int64_t lo = 0, hi = 0;
  if (m.numel() > 0) {
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      const int64_t ext = (m.sizes[d] - 1) * m.strides[d];
      (ext < 0 ? lo : hi) += ext;
    }
    buf.resize(size_t(hi - lo + 1) * size_t(es));
    SEGRED_CUDA_CHECK(cudaMemcpyAsync(buf.data(), static_cast<const char*>(m.data) + lo * es, buf.size(),
                                      cudaMemcpyDeviceToHost, s),
                      detail::cat(op, ": copying ", use_lengths ? "lengths" : "offsets", " to the host"));
    SEGRED_CUDA_CHECK(cudaStreamSynchronize(s), detail::cat(op, ": cudaStreamSynchronize"));
  } else {
    buf.resize(16);
  }
  const TensorView host(buf.data() - lo * es, m.dtype, m.sizes, m.strides, DeviceRef{});
  detail::normalise_offsets(op, lay, host, use_lengths, false);
}

// The arena bytes prepare takes for a call.
template <class Idx>
size_t prepare_bytes(const detail::SegmentGeometry& geo, int64_t scan_target, bool tiles) {
  size_t b = Arena::bytes<KV>(scan_target) + Arena::bytes<int>(scan_target) + Arena::bytes<Idx>(geo.segs + 1);
  if (tiles)
    b += 2 * Arena::bytes<Idx>(geo.workers + 1) + Arena::bytes<unsigned>(3) +
         Arena::bytes<Idx>(3 * kScatterRecs * scan_target) +  // spec 4's records (offsets only; lengths leave it)
         Arena::bytes<Idx>(geo.workers / kShortFix + 1) +
         (geo.fused_fixup ? Arena::bytes<unsigned long long>(2 * (geo.workers + 1)) : 0);
  return b;
}

// Queues prepare; fills c.q and, with tiles, c.tile_i/tile_j/long_list/long_count.
template <class Idx>
void run_prepare(const char* op, const detail::SegmentLayout& lay, const Segments& seg, bool tiles,
                 int64_t scan_target, LaunchCtx& c) {
  const bool use_lengths = seg.lengths.has_value();
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  const auto& geo = c.geo;
  PrepArgs<Idx> a;
  a.m = MetaReader{m.data, m.dtype == DType::Int32, strided_of(op, use_lengths ? "lengths" : "offsets", m)};
  a.outer = lay.outer;
  a.S = lay.S;
  a.L = lay.L;
  a.k = m.sizes.back();
  a.lengths = use_lengths;
  a.scan_target = scan_target;
  a.agg = c.arena->take<KV>(scan_target);
  a.flags = c.arena->take<int>(scan_target);
  a.q = c.arena->take<Idx>(geo.segs + 1);
  a.nseg = Idx(geo.segs);
  a.nel = Idx(geo.positions);
  a.spec = detail::segment_test_caps().prep_spec.load(std::memory_order_relaxed);
  const int64_t meta_items = lay.outer * m.sizes.back();
  if (a.spec == 5)  // the rule (segment_geometry.h): scattered, or searched before the grid.sync
    a.spec = tiles && !use_lengths && detail::prep_scatter_rule(meta_items, scan_target, geo.positions, geo.items)
                 ? 4
                 : 0;
  if (tiles && !use_lengths && scan_target > 0) a.srec = c.arena->take<Idx>(3 * kScatterRecs * scan_target);
  else if (a.spec == 4) a.spec = 3;  // nothing to scatter from: the search after the sync
  int64_t want = std::max<int64_t>(scan_target, detail::ceil_div(lay.outer, kPrepBlock));
  if (tiles) {
    a.W = geo.workers;
    a.items = geo.items;
    a.tile_i = c.arena->take<Idx>(geo.workers + 1);
    a.tile_j = c.arena->take<Idx>(geo.workers + 1);
    // [0] fix-up counter, [1] a long crossing segment may exist, [2] spec 4's form (probe_merge_space)
    a.long_count = c.arena->take<unsigned>(3);
    c.long_list = c.arena->take<Idx>(geo.workers / kShortFix + 1);
    if (geo.fused_fixup) {  // flat_reduce's fused fix-up slots (the plan's variant), zeroed by prepare
      a.fuse_n = 2 * (geo.workers + 1);
      a.fuse_pub = c.arena->take<unsigned long long>(a.fuse_n);
      c.fuse_pub = a.fuse_pub;
    }
    c.tile_i = a.tile_i;
    c.tile_j = a.tile_j;
    c.long_count = a.long_count;
    want = std::max(want, detail::ceil_div(geo.workers + 1, kPrepBlock));
  }
  c.q = a.q;
  if (a.spec == 4)
    impl::launch_coop(prepare<Idx, true>, want, kPrepBlock, c, "prepare", a);
  else
    impl::launch_coop(prepare<Idx, false>, want, kPrepBlock, c, "prepare", a);
}

// Scan blocks wanted for the metadata: ~kPrepItemsPerBlock items each, at most
// what a cooperative grid of prepare holds.
template <class Idx>
int64_t scan_target(const detail::SegmentLayout& lay, const Segments& seg) {
  const TensorView& m = seg.lengths ? *seg.lengths : *seg.offsets;
  const int64_t items = lay.outer * m.sizes.back();
  if (items <= 0) return 0;
  // Both instantiations hold 4 blocks an SM (__launch_bounds__, 7 KB of shared memory at most).
  const int64_t cap = std::min(impl::coop_capacity(prepare<Idx, false>, kPrepBlock, "prepare"),
                               impl::coop_capacity(prepare<Idx, true>, kPrepBlock, "prepare"));
  return std::min(detail::ceil_div(items, kPrepItemsPerBlock), cap);
}

SegmentProblem problem_of(const detail::SegmentLayout& lay, const TensorView& data, Reduce reduce, Direction dir) {
  return {Backend::CUDA, dir, reduce, data.dtype, lay.index_dtype, lay.outer, lay.L, lay.inner, lay.S};
}

template <class F>
void dispatch(DType dt, int bits, F&& f) {
  auto with = [&](auto tag) {
    using T = decltype(tag);
    if (bits == 32)
      f(T{}, int32_t{});
    else
      f(T{}, int64_t{});
  };
  switch (dt) {
    case DType::Float32: with(float{}); break;
    case DType::Float64: with(double{}); break;
    case DType::Float16: with(half_t{}); break;
    case DType::BFloat16: with(bfloat16_t{}); break;
    default: throw TypeError(detail::cat("segment_reduce: unsupported dtype ", dtype_name(dt)));
  }
}

// The problem with the device facts of the wave fit (SegmentProblem::sm_count,
// feat_blocks_per_sm; src/core/segment_geometry.h, feat_wave_items): only a feature
// call with records has one, and its kernel is the instantiation the geometry without
// the fit picks (the fit changes the items, not the kernel, except at an index width
// edge, where the other width's occupancy then only steers the split).
SegmentProblem with_wave(SegmentProblem p, bool aligned, int device) {
  const bool records = p.direction == Direction::Fwd || p.reduce == Reduce::Max || p.reduce == Reduce::Min;
  const detail::SegmentGeometry g = detail::segment_geometry(p, aligned);
  if (g.flat || g.prod_bwd || !records) return p;
  p.sm_count = detail::cuda_sm_count(device);
  dispatch(p.dtype, g.index_bits, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    p.feat_blocks_per_sm = p.direction == Direction::Fwd ? feat_fwd_blocks_per_sm<T, Idx>(p.reduce, g.vec)
                                                         : feat_bwd_blocks_per_sm<T, Idx>(g.vec);
  });
  return p;
}

// The launch context every call shares.
LaunchCtx ctx_of(const detail::SegmentLayout& lay, const detail::SegmentGeometry& geo, Direction dir, cudaStream_t s) {
  LaunchCtx c;
  c.stream = s;
  c.geo = geo;
  c.outer = lay.outer;
  c.L = lay.L;
  c.inner = lay.inner;
  c.S = lay.S;
  c.path = detail::segment_path(dir, geo);
  c.fixup_choice = detail::has_fixup_variant(geo, dir);
  const int pdl = detail::segment_test_caps().pdl.load(std::memory_order_relaxed);  // 0 rule, 1 always, 2 never
  c.pdl = pdl == 2 || !pdl_supported() ? 0 : pdl == 1 ? 2 : 1;
  return c;
}

// The rest of a call at the (dtype, index width) instantiation: one scratch
// allocation for everything, prepare, then run(T, Idx) queues the kernels.
template <class Run>
void run_call(const char* op, const detail::SegmentLayout& lay, const Segments& seg, DType dt, Direction dir,
              Reduce reduce, Scratch& scratch, LaunchCtx& c, Run&& run) {
  dispatch(dt, c.geo.index_bits, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    const bool tiles = !c.geo.prod_bwd;
    const int64_t st = scan_target<Idx>(lay, seg);
    Arena arena(scratch, prepare_bytes<Idx>(c.geo, st, tiles) + run_scratch_bytes<T, Idx>(c, dir, reduce));
    c.arena = &arena;
    run_prepare<Idx>(op, lay, seg, tiles, st, c);
    run(t, i);
    c.arena = nullptr;
  });
}

}  // namespace

void segment_reduce_fwd(const Plan&, const detail::SegmentLayout& lay0, const Segments& seg, const TensorView& data,
                        Reduce reduce, const TensorView& out, void* stream) {
  const char* op = "segment_reduce";
  DeviceGuard guard(data.device.index);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  detail::SegmentLayout lay = lay0;
  if (!seg.unsafe) validate_on_host(op, lay, seg, s);
  if (out.numel() == 0) return;
  Scratch scratch(s);
  const void* x = contiguous(op, "data", data, scratch, s);
  const SegmentProblem p = with_wave(problem_of(lay, data, reduce, Direction::Fwd), aligned16(x), data.device.index);
  FwdArgs a;
  a.c = ctx_of(lay, detail::segment_geometry(p, aligned16(x)), Direction::Fwd, s);
  a.x = x;
  a.out = out.data;
  a.reduce = reduce;
  a.initial = seg.initial;
  run_call(op, lay, seg, data.dtype, Direction::Fwd, reduce, scratch, a.c,
           [&](auto t, auto i) { run_fwd<decltype(t), decltype(i)>(a); });
}

void segment_reduce_bwd(const Plan&, const detail::SegmentLayout& lay0, const Segments& seg, const TensorView& grad,
                        const TensorView& output, const TensorView& data, Reduce reduce, Tie tie,
                        const TensorView& grad_input, void* stream) {
  const char* op = "segment_reduce_backward";
  DeviceGuard guard(data.device.index);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  detail::SegmentLayout lay = lay0;
  if (!seg.unsafe) validate_on_host(op, lay, seg, s);
  if (grad_input.numel() == 0) return;
  Scratch scratch(s);
  const bool need_x = reduce == Reduce::Max || reduce == Reduce::Min || reduce == Reduce::Prod;
  const bool need_y = reduce == Reduce::Max || reduce == Reduce::Min;
  const void* x = need_x ? contiguous(op, "data", data, scratch, s) : nullptr;
  const void* y = need_y ? contiguous(op, "output", output, scratch, s) : nullptr;
  const void* g = contiguous(op, "grad", grad, scratch, s);
  const bool al = aligned16(grad_input.data) && (!x || aligned16(x));
  const SegmentProblem p = with_wave(problem_of(lay, data, reduce, Direction::Bwd), al, data.device.index);
  BwdArgs a;
  a.c = ctx_of(lay, detail::segment_geometry(p, al), Direction::Bwd, s);
  a.g = g;
  a.y = y;
  a.x = x;
  a.gi = grad_input.data;
  a.reduce = reduce;
  a.tie = tie;
  a.initial = seg.initial;
  run_call(op, lay, seg, data.dtype, Direction::Bwd, reduce, scratch, a.c,
           [&](auto t, auto i) { run_bwd<decltype(t), decltype(i)>(a); });
}

// ---- the call preparation shared with the ragged softmax family (src/cuda/merge_space.cuh)

void validate_metadata(const char* op, detail::SegmentLayout& lay, const Segments& seg, cudaStream_t s) {
  validate_on_host(op, lay, seg, s);
}

const void* contiguous_input(const char* op, const char* name, const TensorView& t, Scratch& scratch,
                             cudaStream_t s) {
  return contiguous(op, name, t, scratch, s);
}

bool is_aligned16(const void* p) { return aligned16(p); }

template <class Idx>
size_t merge_space_bytes(const detail::SegmentLayout& lay, const Segments& seg, const detail::SegmentGeometry& geo,
                         bool tiles) {
  return prepare_bytes<Idx>(geo, scan_target<Idx>(lay, seg), tiles);
}

template <class Idx>
void prepare_merge_space(const char* op, const detail::SegmentLayout& lay, const Segments& seg, LaunchCtx& c,
                         bool tiles) {
  run_prepare<Idx>(op, lay, seg, tiles, scan_target<Idx>(lay, seg), c);
}

template size_t merge_space_bytes<int32_t>(const detail::SegmentLayout&, const Segments&,
                                           const detail::SegmentGeometry&, bool);
template size_t merge_space_bytes<int64_t>(const detail::SegmentLayout&, const Segments&,
                                           const detail::SegmentGeometry&, bool);
template void prepare_merge_space<int32_t>(const char*, const detail::SegmentLayout&, const Segments&, LaunchCtx&,
                                           bool);
template void prepare_merge_space<int64_t>(const char*, const detail::SegmentLayout&, const Segments&, LaunchCtx&,
                                           bool);

// ---- test probe (src/cuda/merge_space_probe.h)

MergeSpaceProbe probe_merge_space(const TensorView& data, const Segments& seg, Reduce reduce, Direction dir) {
  const char* op = dir == Direction::Fwd ? "segment_reduce" : "segment_reduce_backward";
  DeviceGuard guard(data.device.index);
  const cudaStream_t s = static_cast<cudaStream_t>(current_stream());
  detail::SegmentLayout lay = detail::resolve_layout(op, data, seg);
  if (!seg.unsafe) validate_on_host(op, lay, seg, s);
  const SegmentProblem p = with_wave(problem_of(lay, data, reduce, dir), aligned16(data.data), data.device.index);
  LaunchCtx c = ctx_of(lay, detail::segment_geometry(p, aligned16(data.data)), dir, s);
  MergeSpaceProbe r;
  r.index_bits = c.geo.index_bits;
  r.segs = c.geo.segs;
  r.positions = c.geo.positions;
  r.workers = c.geo.workers;
  r.items = c.geo.items;
  r.tiles = !c.geo.prod_bwd;
  r.sm_count = p.sm_count;
  r.feat_blocks_per_sm = p.feat_blocks_per_sm;
  Scratch scratch(s);
  auto go = [&](auto tag) {
    using Idx = decltype(tag);
    const int64_t st = scan_target<Idx>(lay, seg);
    // Blocks of prepare that may run the scan: lengths always, offsets only when
    // unsafe (validated offsets never drop, so the speculative pass is all of q).
    r.scan_tiles = (seg.lengths.has_value() || seg.unsafe) ? int(st) : 0;
    Arena arena(scratch, prepare_bytes<Idx>(c.geo, st, r.tiles));
    c.arena = &arena;
    run_prepare<Idx>(op, lay, seg, r.tiles, st, c);
    auto back = [&](const void* src, int64_t n) {
      std::vector<Idx> h(size_t(std::max<int64_t>(n, 0)));
      if (n > 0)
        SEGRED_CUDA_CHECK(cudaMemcpyAsync(h.data(), src, size_t(n) * sizeof(Idx), cudaMemcpyDeviceToHost, s),
                          "probe_merge_space: copy");
      return h;
    };
    const auto q = back(c.q, c.geo.segs + 1);
    std::vector<Idx> ti, tj;
    unsigned lc[3] = {0, 0, 0};
    if (r.tiles) {
      ti = back(c.tile_i, c.geo.workers + 1);
      tj = back(c.tile_j, c.geo.workers + 1);
      SEGRED_CUDA_CHECK(cudaMemcpyAsync(lc, c.long_count, 3 * sizeof(unsigned), cudaMemcpyDeviceToHost, s),
                        "probe_merge_space: copy");
    }
    SEGRED_CUDA_CHECK(cudaStreamSynchronize(s), "probe_merge_space: cudaStreamSynchronize");
    r.q.assign(q.begin(), q.end());
    r.tile_i.assign(ti.begin(), ti.end());
    r.tile_j.assign(tj.begin(), tj.end());
    r.long_count = r.tiles ? int64_t(lc[0]) : -1;
    r.scatter_form = r.tiles ? int(lc[2]) : -1;
    r.long_flag = r.tiles ? int64_t(lc[1]) : -1;
    c.arena = nullptr;
  };
  if (c.geo.index_bits == 32)
    go(int32_t{});
  else
    go(int64_t{});
  return r;
}

}  // namespace segred::cuda
