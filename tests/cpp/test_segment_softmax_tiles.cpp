// The block algorithm of the CUDA ragged softmax kernels (src/ops/segment_softmax_tiles.h)
// executed on the CPU: every block of the grid, thread by thread, phase by phase
// in the order the kernels run them (a warp's shuffle steps as lanes in
// descending order, so each lane reads its neighbour's value of the previous
// step), with segment_reduce's partition and fix-up rules stated as plain loops.
// It runs on every machine (no GPU needed) and checks, for every kind, dtype and
// geometry (blocks of 256/64/32 threads, tiles from 3 items to the shared-memory
// budget, aligned and unaligned vectors, slabs), that every output element is
// written and equals the float64 reference: so a logic error of the kernels
// shows up here, not first on the H200.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <new>

#include "src/ops/segment_softmax_tiles.h"
#include "tests/cpp/segment_softmax_test_util.h"

namespace segred::testing::ss {
namespace {

namespace tiles = segred::ops::ss;

template <class T>
struct HostCv {
  static acc_t<T> ld(T v) { return load(v); }
  static T st(acc_t<T> v) { return store<T>(v); }
};

// 16-byte aligned storage of exactly n elements of T (so that AddressSanitizer
// sees any overrun), optionally shifted by one element (unaligned vectors).
template <class T>
struct Buf {
  struct Free {
    void operator()(unsigned char* q) const { ::operator delete[](q, std::align_val_t(16)); }
  };
  std::unique_ptr<unsigned char[], Free> raw;
  T* p = nullptr;
  Buf(size_t n, bool shift)
      : raw(static_cast<unsigned char*>(::operator new[]((n + (shift ? 1 : 0)) * sizeof(T) + 1, std::align_val_t(16)))) {
    p = reinterpret_cast<T*>(raw.get()) + (shift ? 1 : 0);
  }
};

struct Config {
  int block = 256;
  int64_t max_items = 0;
  bool aligned = true;
};

template <class Idx>
void partition(const std::vector<Idx>& q, int64_t U, int64_t N, int64_t T, int64_t tiles, std::vector<Idx>& ti,
               std::vector<Idx>& tj) {
  ti.resize(size_t(tiles + 1));
  tj.resize(size_t(tiles + 1));
  for (int64_t w = 0; w <= tiles; ++w) {
    const int64_t d = std::min(w * T, U + N);
    int64_t lo = std::max<int64_t>(0, d - N), hi = std::min(d, U);
    while (lo < hi) {  // merge path: end of segment mid (q[mid + 1]) before position d - mid - 1?
      const int64_t mid = lo + (hi - lo) / 2;
      if (int64_t(q[size_t(mid + 1)]) <= d - mid - 1) lo = mid + 1;
      else hi = mid;
    }
    ti[size_t(w)] = Idx(lo);
    tj[size_t(w)] = Idx(d - lo);
  }
}

// Lanes (row-output kinds with a shared-memory middle-piece slot, V = 4) whose
// walk kept a piece in the slot, and whose walk wrote pieces itself (write_pieces):
// the tests that mean to reach both check them.
struct SlotTally {
  int64_t slot = 0, written = 0;
};
SlotTally g_slots;

// Runs kind K on the emulated device; returns the output as doubles.
template <SsKind K, class T, int V, class Idx>
std::vector<double> emulate(const Case& c, const Inputs& in, const Config& cfg, std::string* geo_desc) {
  using A = acc_t<T>;
  using Cv = HostCv<T>;
  using P = tiles::Pol<K, A>;
  using Stat = typename P::Stat;
  SegmentSoftmaxProblem prob{Backend::CUDA, is_bwd(K) ? Direction::Bwd : Direction::Fwd, op_of(K), dtype_of<T>(),
                             c.outer, c.L, c.F, c.S};
  const auto g = detail::segment_softmax_geometry(prob, cfg.aligned, cfg.block, cfg.max_items);
  EXPECT_EQ(g.vec, V);
  *geo_desc = "block " + std::to_string(g.block) + " items " + std::to_string(g.items) + " E " +
              std::to_string(g.chunk_rows) + " G " + std::to_string(g.lanes) + " W " + std::to_string(g.width) +
              " slabs " + std::to_string(g.slabs) + " cvec " + std::to_string(g.cvec) + " tiles " +
              std::to_string(g.tiles);
  // The tile part fits the budget; the V = 4 middle-piece slots come on top (one per thread).
  EXPECT_LE(g.smem_slots, detail::kSsSmemBudget);
  EXPECT_LE(g.smem_bytes, detail::kSsSmemLimit);
  EXPECT_EQ(g.slot_bytes, detail::ss_smem_slots(K, V) * int64_t(g.block) * V * int64_t(sizeof(Stat)));
  EXPECT_GE(int64_t(g.chunks) * g.chunk_rows, g.items);
  auto p = tiles::params_of<Idx>(g, c.S, c.F);
  // Merge space q and the partition.
  const int64_t U = g.segs, N = g.positions;
  std::vector<Idx> q(size_t(U + 1));
  q[0] = 0;
  for (int64_t r = 0; r < c.outer; ++r)
    for (int64_t s = 0; s <= c.S; ++s) q[size_t(1 + r * (c.S + 1) + s)] = Idx(r * c.L + c.off[size_t(r * (c.S + 1) + s)]);
  q[size_t(U)] = Idx(N);
  std::vector<Idx> ti, tj;
  partition(q, U, N, g.items, g.tiles, ti, tj);
  p.q = q.data();
  p.tile_i = ti.data();
  p.tile_j = tj.data();
  // Device arrays: inputs (possibly unaligned), output poisoned with a sentinel.
  const bool shift = !cfg.aligned;
  auto upload = [&](const std::vector<double>& v, Buf<T>& b) {
    for (size_t i = 0; i < v.size(); ++i) b.p[i] = store<T>(acc_t<T>(v[i]));
  };
  Buf<T> b0(in.in0.size(), shift), b1(in.in1.size(), shift), bs0(in.seg0.size(), false), bs1(in.seg1.size(), false);
  upload(in.in0, b0);
  upload(in.in1, b1);
  upload(in.seg0, bs0);
  upload(in.seg1, bs1);
  const size_t nout = in.want.size();
  Buf<T> out(nout, shift);
  const T sentinel = store<T>(acc_t<T>(12345.0));
  for (size_t i = 0; i < nout; ++i) out.p[i] = sentinel;
  p.in0 = b0.p;
  p.in1 = b1.p;
  p.seg0 = bs0.p;
  p.seg1 = bs1.p;
  p.out = out.p;
  const size_t nstat = size_t(g.tiles * c.F);
  std::vector<Stat> carry(nstat), head(nstat), fin(nstat);
  // Poison the statistics: a read of one that was never written gives NaN.
  std::memset(static_cast<void*>(carry.data()), 0xff, nstat * sizeof(Stat));
  std::memset(static_cast<void*>(head.data()), 0xff, nstat * sizeof(Stat));
  std::memset(static_cast<void*>(fin.data()), 0xff, nstat * sizeof(Stat));
  p.carry = carry.data();
  p.head = head.data();
  p.fin = fin.data();
  const int B = g.block, G = g.lanes;
  Buf<unsigned char> smem(size_t(g.smem_bytes), false);
  for (int64_t bid = 0; bid < g.grid; ++bid) {
    std::memset(smem.p, 0xab, size_t(g.smem_bytes));  // stale shared memory is garbage
    const auto t = tiles::tile_of(p, Idx(bid));
    const tiles::Smem sm(smem.p, p);
    for (int tid = 0; tid < B; ++tid) tiles::stage<K, T>(p, t, sm, tid, B);
    if constexpr (K == SsKind::LseBwd) {
      for (int tid = 0; tid < B; ++tid) tiles::walk_lse_bwd<T, A, Cv, V>(p, t, sm, tid);
      for (int tid = 0; tid < B; ++tid) tiles::finish_tile<K, T, A, Cv>(p, t, sm, tid, B);
      continue;
    } else {
      std::vector<tiles::Lane<Stat, V>> ln(static_cast<size_t>(B));
      for (int tid = 0; tid < B; ++tid) tiles::walk<K, T, A, Cv, V>(ln[size_t(tid)], p, t, sm, tid);
      if constexpr (P::kRowOut && tiles::Lane<Stat, V>::kSlots > 0)
        for (const auto& l : ln) {
          g_slots.slot += l.nq > tiles::Lane<Stat, V>::kFifo;
          g_slots.written += l.ovf >= 0;
        }
      for (int d = G; d < 32; d <<= 1)
        for (int tid = B - 1; tid >= 0; --tid) {
          const bool valid = (tid & 31) >= d;
          const auto& nb = ln[size_t(valid ? tid - d : tid)];
          tiles::scan_take<K, A, V>(ln[size_t(tid)], nb.key, nb.sv, valid);
        }
      for (int tid = 0; tid < B; ++tid) tiles::warp_total_out<K, A, V>(ln[size_t(tid)], sm, tid, G);
      for (int tid = 0; tid < B; ++tid) {
        const int k0 = ln[size_t((tid & ~31) + (tid & 31) % G)].key;
        tiles::warp_carry_in<K, A, V>(ln[size_t(tid)], sm, tid, G, k0);
      }
      for (int tid = 0; tid < B; ++tid)
        if ((tid & 31) >= G) {
          auto& me = ln[size_t(tid)];
          const auto& nb = ln[size_t(tid - G)];
          me.xkey = nb.key;
          for (int i = 0; i < V; ++i) me.xv[i] = nb.sv[i];
        }
      for (int tid = 0; tid < B; ++tid) tiles::publish<K, T, A, Cv, V>(ln[size_t(tid)], p, t, sm, tid);
      if constexpr (P::kRowOut)
        for (int tid = 0; tid < B; ++tid) tiles::write_edges<K, T, A, Cv, V>(ln[size_t(tid)], p, t, sm, tid);
      for (int tid = 0; tid < B; ++tid) tiles::finish_tile<K, T, A, Cv>(p, t, sm, tid, B);
    }
  }
  if constexpr (P::kReduce) {
    // segment_reduce's fix-up: tile w completing crossing segment t combines the
    // carries of tiles [w0, w) and its head, in tile order.
    for (int64_t w = 0; w < g.tiles; ++w) {
      const Idx t = ti[size_t(w)];
      if (!(ti[size_t(w + 1)] > t && q[size_t(t)] < tj[size_t(w)])) continue;
      const int64_t w0 = t == 0 ? 0 : (int64_t(t) - 1 + int64_t(q[size_t(t)])) / g.items;
      for (int64_t f = 0; f < c.F; ++f) {
        Stat acc = P::identity();
        for (int64_t pp = w0; pp < w; ++pp) acc = P::combine(acc, carry[size_t(pp * c.F + f)]);
        tiles::finish_crossing<K, T, A, Cv>(p, t, Idx(f), P::combine(acc, head[size_t(w * c.F + f)]));
      }
    }
  }
  if constexpr (P::kDeferred) {
    std::vector<typename P::Prep> prep(size_t(2 * g.width));
    for (int64_t bid = 0; bid < g.grid; ++bid) {
      const auto t = tiles::tile_of(p, Idx(bid));
      const auto cr = tiles::crossing_ranges(p, t);
      for (int tid = 0; tid < 256; ++tid) tiles::crossing_prep<K, A>(p, t, cr, prep.data(), tid, 256);
      for (int tid = 0; tid < 256; ++tid) tiles::crossing_apply<K, T, A, Cv>(p, t, cr, prep.data(), tid, 256);
    }
  }
  std::vector<double> got(nout);
  for (size_t i = 0; i < nout; ++i) {
    got[i] = double(load(out.p[i]));
    if (std::memcmp(&out.p[i], &sentinel, sizeof(T)) == 0) {
      ADD_FAILURE() << "output element " << i << " never written";
      break;
    }
  }
  return got;
}

template <class T>
double round_to_t(double v) {
  return double(load(store<T>(acc_t<T>(v))));
}

// The kernels' index type is a template argument: both are emulated (i64 on
// `wide_index`), the arithmetic being the same code.
template <SsKind K, class T>
void check_kind(const Case& c, std::mt19937_64& rng, const Config& cfg, bool specials, bool wide_index,
                bool dense = false) {
  const Inputs in = make_inputs(K, c, rng, specials, round_to_t<T>, dense);
  std::string geo;
  constexpr int vmax = sizeof(T) == 8 ? 2 : 4;
  const bool vec = c.F % vmax == 0;
  std::vector<double> got;
  if (vec) got = wide_index ? emulate<K, T, vmax, int64_t>(c, in, cfg, &geo) : emulate<K, T, vmax, int32_t>(c, in, cfg, &geo);
  else got = wide_index ? emulate<K, T, 1, int64_t>(c, in, cfg, &geo) : emulate<K, T, 1, int32_t>(c, in, cfg, &geo);
  EXPECT_TRUE(close(got, in, unit_out(dtype_of<T>()), dtype_of<T>() == DType::Float64))
      << kind_name(K) << " " << dtype_name(dtype_of<T>()) << " " << c.name << " | " << geo
      << (cfg.aligned ? "" : " unaligned") << (wide_index ? " i64" : " i32");
}

template <class T>
void check_all_kinds(const Case& c, std::mt19937_64& rng, const Config& cfg, bool specials, bool wide_index,
                     bool dense = false) {
  check_kind<SsKind::SoftmaxFwd, T>(c, rng, cfg, specials, wide_index, dense);
  check_kind<SsKind::LogSoftmaxFwd, T>(c, rng, cfg, specials, wide_index, dense);
  check_kind<SsKind::LseFwd, T>(c, rng, cfg, specials, wide_index, dense);
  check_kind<SsKind::SoftmaxBwd, T>(c, rng, cfg, specials, wide_index, dense);
  check_kind<SsKind::LogSoftmaxBwd, T>(c, rng, cfg, specials, wide_index, dense);
  check_kind<SsKind::LseBwd, T>(c, rng, cfg, specials, wide_index, dense);
}

const Config kConfigs[] = {{256, 0, true},  {256, 3, true},  {256, 17, true},  {64, 40, true},
                           {32, 100, false}, {256, 300, true}, {128, 0, false}, {32, 7, true}};

uint64_t seed_of(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ uint64_t(*p)) * 1099511628211ull;
  return h;
}

template <class T>
class SegmentSoftmaxTiles : public ::testing::Test {};
TYPED_TEST_SUITE(SegmentSoftmaxTiles, FloatTypes, DtypeName);

// Heads 1, 2, 3, 4, 8, 12 (contiguous tiles, V = 4 or 1) and 33, 64, 130, 200
// (slabs of 64 bytes per row), every metadata style, ghosts, specials; the 8
// geometries and both index types in rotation.
TYPED_TEST(SegmentSoftmaxTiles, EveryKindEveryGeometryAgainstReference) {
  std::mt19937_64 rng(seed_of(dtype_name(dtype_of<TypeParam>()).data()));
  const bool wide = sizeof(TypeParam) >= 4;
  const char* styles[] = {"mixed", "ones", "long", "uniform"};
  int n = 0;
  for (int64_t F : {1, 2, 3, 4, 8, 12, 33, 64, 130, 200}) {
    if (!wide && (F == 2 || F == 3 || F == 33 || F == 130)) continue;
    for (int ghosts = 0; ghosts < 2; ++ghosts)
      for (int rep = 0; rep < 2; ++rep, ++n) {
        const char* style = styles[(n + rep) % 4];
        const int64_t outer = 1 + (F + ghosts + rep) % 3;
        const int64_t S = F >= 64 ? 7 : style[0] == 'o' ? 200 : 24;
        const Case c = make_case(rng, outer, S, F, style, ghosts == 1, F >= 64 ? 120 : 700);
        const Config& cfg = kConfigs[size_t(n % 8)];
        SCOPED_TRACE(c.name);
        check_all_kinds<TypeParam>(c, rng, cfg, (n % 3) != 1, n % 2 == 1);
      }
  }
}

// Degenerate layouts: no rows, no segments, only empty segments, one row, one
// segment, a single element; and tiles of one item.
TYPED_TEST(SegmentSoftmaxTiles, DegenerateLayouts) {
  std::mt19937_64 rng(7);
  const std::vector<Case> cs = {
      {"L=0, 4 empty segments", 1, 0, 3, 4, {0, 0, 0, 0, 0}},
      {"S=0: every row a ghost", 1, 5, 2, 0, {3}},
      {"empty segments at both ends, ghosts", 2, 6, 1, 3, {0, 0, 6, 6, 1, 1, 1, 5}},
      {"one element", 1, 1, 1, 1, {0, 1}},
      {"one row of 8 heads", 1, 1, 8, 1, {0, 1}},
      {"one segment", 1, 9, 4, 1, {0, 9}},
      {"batched, one row all in one segment", 3, 4, 2, 2, {0, 4, 4, 0, 0, 4, 1, 2, 3}},
  };
  for (const Case& c : cs)
    for (Config cfg : {Config{256, 0, true}, Config{32, 1, true}, Config{32, 2, false}, Config{64, 3, true}}) {
      SCOPED_TRACE(c.name);
      check_all_kinds<TypeParam>(c, rng, cfg, false, cfg.block == 32);
    }
}

// The walk's lock-step pass and the row pass: many short segments per chunk
// (several middle pieces, more than a lane keeps, so some are written by the
// walk itself), segments crossing chunk and tile edges, empty and one-row
// segments, ghosts, and special values in every segment and feature (-inf only,
// NaN, +inf once and twice, -inf beside finite values, a huge spread; one-row
// segments of a lone -inf, NaN or +inf), on geometries with long chunks (E up to
// ~200 rows) and short ones.
TYPED_TEST(SegmentSoftmaxTiles, LockStepWalkShortSegmentsDenseSpecials) {
  std::mt19937_64 rng(seed_of("lockstep") ^ sizeof(TypeParam));
  int n = 0;
  for (int64_t F : {1, 2, 4, 8, 12, 64}) {
    if (sizeof(TypeParam) < 4 && F == 2) continue;
    for (int ghosts = 0; ghosts < 2; ++ghosts, ++n) {
      const Case c = short_segments_case(rng, 1 + n % 2, F >= 64 ? 60 : 400, F, ghosts == 1);
      for (Config cfg : {Config{256, 0, true}, Config{32, 0, true}, Config{64, 0, false}, Config{128, 150, true},
                         Config{32, 45, false}}) {
        SCOPED_TRACE(c.name + " block " + std::to_string(cfg.block) + " items " + std::to_string(cfg.max_items));
        check_all_kinds<TypeParam>(c, rng, cfg, false, (n + cfg.block) % 3 == 0, true);
      }
    }
  }
}

// Segments laid on the walk's chunk grid (E rows per chunk; the first tile's
// chunks start at multiples of E): exactly one chunk from its first row, one
// chunk and one row (crossing by one), one row short of a chunk, empty, one row,
// runs of one-row segments (several middle pieces in a chunk, more than a lane
// keeps in registers), two chunks; then a random run of those lengths; ghost rows
// after the last segment or none. With dense specials (a segment all -inf, a NaN,
// +inf once or twice, -inf beside finite values, a +-60 spread, per (segment,
// feature)) and without. E comes from kind K's own geometry (the backward kinds
// stage two arrays: shorter tiles, other E). Exercises the row pass's piece
// constants computed before its loop: first piece, kept middle pieces, the rows
// the walk wrote, the open piece, at every position in the chunk.
template <SsKind K, class T>
void check_chunk_grid(int64_t F, const Config& cfg, std::mt19937_64& rng, bool ghosts, bool wide, bool dense) {
  const SegmentSoftmaxProblem prob{Backend::CUDA, is_bwd(K) ? Direction::Bwd : Direction::Fwd, op_of(K),
                                   dtype_of<T>(), 1, 1, F, 1};
  const auto g = detail::segment_softmax_geometry(prob, cfg.aligned, cfg.block, cfg.max_items);
  const int64_t E = g.chunk_rows;
  auto nn = [](int64_t v) { return v > 0 ? v : int64_t(0); };
  std::vector<int64_t> lens = {E, E + 1, E - 1, 0, 1, nn(E - 1), 1, 1, 1, 0, 1, nn(E - 4), 2 * E, 0, E, 1, 1, nn(E - 2), E};
  const int64_t pick_from[] = {0, 1, 1, 2, 3, nn(E - 1), E, E + 1, 2 * E};
  std::uniform_int_distribution<int> pick(0, int(sizeof(pick_from) / sizeof(pick_from[0])) - 1);
  for (int i = 0; i < 60; ++i) lens.push_back(pick_from[size_t(pick(rng))]);
  Case c;
  c.outer = 1;
  c.F = F;
  c.S = int64_t(lens.size());
  c.name = "chunk grid E=" + std::to_string(E) + " F=" + std::to_string(F) + (ghosts ? " +ghosts" : "") +
           (dense ? " dense specials" : "");
  int64_t o = 0;
  c.off.push_back(0);
  for (auto v : lens) c.off.push_back(o += v);
  c.L = o + (ghosts ? 5 : 0);
  check_kind<K, T>(c, rng, cfg, false, wide, dense);
}

TYPED_TEST(SegmentSoftmaxTiles, ChunkGridPieces) {
  std::mt19937_64 rng(seed_of("chunkgrid") ^ sizeof(TypeParam));
  int n = 0;
  for (int64_t F : {1, 2, 4, 8, 64}) {
    if (sizeof(TypeParam) < 4 && F == 2) continue;
    g_slots = SlotTally{};
    for (Config cfg : {Config{256, 0, true}, Config{64, 0, false}, Config{32, 0, true}, Config{128, 150, true},
                       Config{256, 40, false}})
      for (int v = 0; v < 4; ++v, ++n) {
        SCOPED_TRACE("F " + std::to_string(F) + " block " + std::to_string(cfg.block) + " items " +
                     std::to_string(cfg.max_items));
        const bool ghosts = v & 1, dense = v & 2, wide = n % 3 == 0;
        check_chunk_grid<SsKind::SoftmaxFwd, TypeParam>(F, cfg, rng, ghosts, wide, dense);
        check_chunk_grid<SsKind::LogSoftmaxFwd, TypeParam>(F, cfg, rng, ghosts, wide, dense);
        check_chunk_grid<SsKind::LseFwd, TypeParam>(F, cfg, rng, ghosts, wide, dense);
        check_chunk_grid<SsKind::SoftmaxBwd, TypeParam>(F, cfg, rng, ghosts, wide, dense);
        check_chunk_grid<SsKind::LogSoftmaxBwd, TypeParam>(F, cfg, rng, ghosts, wide, dense);
        check_chunk_grid<SsKind::LseBwd, TypeParam>(F, cfg, rng, ghosts, wide, dense);
      }
    // V = 4 (every F here that is a multiple of 4, except float64's V = 2): the
    // shared-memory slot and the pieces past it (write_pieces) were both reached.
    if (F % 4 == 0 && sizeof(TypeParam) < 8) {
      EXPECT_GT(g_slots.slot, 0) << "F " << F;
      EXPECT_GT(g_slots.written, 0) << "F " << F;
    } else {
      EXPECT_EQ(g_slots.slot, 0) << "F " << F;
    }
  }
}

}  // namespace
}  // namespace segred::testing::ss
