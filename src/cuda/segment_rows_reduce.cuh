// segment_reduce forward for narrow feature rows (inner > 1, a row of 8, 16, 32
// or 64 bytes, 16- and 32-bit types): feat_rows_reduce, the forward's
// counterpart of feat_rows_elementwise (segment_kernels.cuh).
//
// Why: feat_reduce gives each lane group its own 32 merge items (~30 rows), so a
// warp's lanes read 32 rows a tile apart: every load instruction touches 32
// lines, and with 545 blocks of 256 (2d_x16_f4 fp32) the kernel is latency-bound
// (ncu at c29931d: 66 cycles per issued instruction, 49% occupancy, 44% of DRAM).
// Here the geometry gives a warp a tile of kRowsItems = 256 merge items
// (segment_geometry.h, g.rows), i.e. one contiguous range of rows [J0, J1), read
// in batches of 32 x P 16-byte chunks: each load one coalesced 512-byte span, P
// loads in flight per lane.
//
// A batch goes through shared memory so that each lane then owns P consecutive
// chunk rows (a chunk row: G 16-byte chunks across one row, G = row bytes / 16;
// or, for 8-byte rows, one chunk holding two rows). The lane folds its rows in
// order, finishing every segment that starts and ends inside them; the segment
// open at its first row and the one open at its last row are joined across the
// lanes by one segmented scan over the warp's row slots (keys: segment ids,
// monotone across lanes), and the batch's open segment is carried to the next
// batch. The order of the combines depends only on the shape: bitwise
// reproducible, like every path.
//
// The tile's outputs are those of every tile (fixup_tree's contract): a segment
// that ends in the tile is finished here unless it began in an earlier tile,
// then its partial over the tile's rows is the tile's head; the partial of the
// segment open at the tile's end is its carry. Begun in an earlier tile, from q
// alone: segment i's first position is merge item i + q[i] and the tile starts
// at merge item w * items = tile_i[w] + tile_j[w], so for i = tile_i[w] the test
// i + q[i] < w * items is fixup_tree's q[t] < tile_j[w]; for any later i it is
// false, as it must be (i - 1 ends in the tile, after its start).
#pragma once
#include "src/cuda/segment_kernels.cuh"

namespace segred::cuda {

constexpr int kRowsChunks = 8;  // 16-byte chunks per lane per batch (loads in flight)

// Element e (a compile-time index after unrolling) of a 16-byte chunk, from its
// bits: no address of the chunk is taken, so it stays in registers.
template <class Raw>
__device__ __forceinline__ Raw chunk_elem(const uint4& c, int e) {
  constexpr int per_word = 4 / int(sizeof(Raw));
  const int wi = e / per_word;
  const unsigned w = wi == 0 ? c.x : wi == 1 ? c.y : wi == 2 ? c.z : c.w;
  if constexpr (sizeof(Raw) == 4) {
    return __uint_as_float(w);
  } else {
    return raw_from_bits<Raw>(uint16_t(w >> (16 * (e % 2))));
  }
}

// V: features of one row that a lane holds per chunk: 16 / sizeof(Raw) for rows
// of 16-64 bytes (G = row bytes / 16 lanes per row), 8 / sizeof(Raw) for 8-byte
// rows (G = 1, RPC = 2 rows per chunk). Launch: one warp per tile, blockDim a
// multiple of 32, dynamic shared memory 32 * kRowsChunks * 16 bytes per warp.
template <class Fn, class Idx, int V>
__global__ void __launch_bounds__(256) feat_rows_reduce(Fn fn, const typename Fn::Raw* __restrict__ x,
                                                        const Idx* __restrict__ q, Idx W, int G, Idx items,
                                                        Idx inner, Idx nel, const Idx* __restrict__ tile_i,
                                                        const Idx* __restrict__ tile_j,
                                                        typename Fn::A* __restrict__ carry,
                                                        typename Fn::A* __restrict__ head) {
  using A = typename Fn::A;
  using Raw = typename Fn::Raw;
  constexpr int RPC = V * int(sizeof(Raw)) == 8 ? 2 : 1;  // rows per chunk
  constexpr int P = kRowsChunks;
  extern __shared__ uint4 rows_smem[];
  const int lane = int(threadIdx.x) & 31;
  uint4* sw = rows_smem + size_t(threadIdx.x >> 5) * (32 * P);
  const Idx w = Idx(blockIdx.x) * Idx(blockDim.x >> 5) + Idx(threadIdx.x >> 5);
  if (w >= W) return;  // whole warps
  const Idx I0 = tile_i[w], J0 = tile_j[w], I1 = tile_i[w + 1], J1 = tile_j[w + 1];
  const int lig = lane & (G - 1), rs = lane / G;  // chunk column, row slot
  const int R = 32 / G;                           // row slots
  const Idx f0 = Idx(lig * V);                    // this lane's first feature
  const Idx NONE = Idx(-1);                       // no segment (keys are >= 0)
  const Idx ib = Idx(items);

  // Segment i (first position qi, end qe), ending in this tile, with the tile's partial v.
  auto complete = [&](Idx i, Idx qi, const A (&v)[V]) {
    if (i + qi < w * ib) {
#pragma unroll
      for (int u = 0; u < V; ++u) head[w * inner + f0 + Idx(u)] = v[u];
    } else {
#pragma unroll
      for (int u = 0; u < V; ++u) fn.finish(i, f0 + Idx(u), v[u]);
    }
  };

  A run[V];  // the tile's partial of segment run_key (open at the end of the last batch)
#pragma unroll
  for (int u = 0; u < V; ++u) run[u] = fn.identity();
  Idx run_key = NONE;
  Idx i = I0;  // the lane's segment cursor (never behind its rows)
  const Idx CR0 = J0 / Idx(RPC), CRE = (J1 + Idx(RPC - 1)) / Idx(RPC);  // chunk rows [CR0, CRE)
  // Chunk rows and rows are formed only below CRE and J1 (no 32-bit overflow near 2^31).
  for (Idx CR = CR0; CR < CRE; CR = CRE - CR > Idx(R * P) ? CR + Idx(R * P) : CRE) {
    const Idx left = CRE - CR;
    // 1. P coalesced loads: step k covers chunk rows CR + k R + [0, R).
    uint4 d[P];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      d[k] = make_uint4(0u, 0u, 0u, 0u);
      if (Idx(k * R + rs) < left) {
        const Idx cr = CR + Idx(k * R + rs);
        const Raw* p = x + cr * Idx(RPC) * inner + f0;
        if (RPC == 1 || cr * 2 + 1 < nel) {
          d[k] = *reinterpret_cast<const uint4*>(p);
        } else {  // the tensor's last row alone (an odd row count): 8 bytes
          const uint2 h = *reinterpret_cast<const uint2*>(p);
          d[k].x = h.x;
          d[k].y = h.y;
        }
      }
    }
    // Chunk u of the batch (u = k * 32 + lane at the store) lives at u ^ s(u):
    // the XOR by ((u / (P G)) G) mod 8 keeps both the stores (32 consecutive u)
    // and the reads (lane (rs, lig) reads u = (rs P + k) G + lig) free of bank
    // conflicts (8 lanes of 16 bytes per wavefront, P G a multiple of 8).
    auto slot = [&](int u) { return u ^ (((u / (P * G)) * G) & 7); };
    __syncwarp();  // the previous batch's reads are done
#pragma unroll
    for (int k = 0; k < P; ++k) sw[slot(k * 32 + lane)] = d[k];
    __syncwarp();
    // 2. The lane's P chunk rows CR + rs P + [0, P), in order.
    Idx fkey = NONE, fqi = 0;  // the lane's first segment, closed in the lane or not
    bool fclosed = false;
    A pf[V], acc[V];
#pragma unroll
    for (int u = 0; u < V; ++u) pf[u] = acc[u] = fn.identity();
    Idx ck = NONE, qi = 0, qe = 0;  // the open segment of the lane's walk [qi, qe)
    bool advance = false;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (Idx(rs * P + k) >= left) break;
      const uint4 c = sw[slot((rs * P + k) * G + lig)];
#pragma unroll
      for (int rr = 0; rr < RPC; ++rr) {
        const Idx j = (CR + Idx(rs * P + k)) * Idx(RPC) + Idx(rr);  // <= J1 (CR + rs P + k < CRE)
        if (j < J0 || j >= J1) continue;
        if (ck == NONE || advance) {
          if (ck == NONE) {  // first row of the lane in this batch: binary search q over [i, I1]
            Idx lo = i, hi = I1;  // q[lo] <= j; the answer is the last m with q[m] <= j
            while (lo < hi) {
              const Idx m = lo + (hi - lo + 1) / 2;
              if (q[m] <= j)
                lo = m;
              else
                hi = m - 1;
            }
            i = lo;
            qi = q[i];
            qe = q[i + 1];
          } else {
            while (qe <= j) {  // past the closed segment and any empty ones
              ++i;
              qi = qe;
              qe = q[i + 1];
            }
          }
          ck = i;
          advance = false;
          if (fkey == NONE) {
            fkey = ck;
            fqi = qi;
          }
        }
#pragma unroll
        for (int u = 0; u < V; ++u)
          acc[u] = fn.combine(acc[u], fn.value(typename Fn::Ctx{}, j, chunk_elem<Raw>(c, rr * V + u)));
        if (j + 1 == qe) {  // the segment's last row
          if (ck == fkey) {
#pragma unroll
            for (int u = 0; u < V; ++u) pf[u] = acc[u];
            fclosed = true;
          } else {
            complete(ck, qi, acc);
          }
#pragma unroll
          for (int u = 0; u < V; ++u) acc[u] = fn.identity();
          advance = true;
        }
      }
    }
    // 3. The lane's tail (the segment open at its last row) joined across slots.
    Idx tk = (ck != NONE && !advance) ? ck : NONE;
    A s[V];
#pragma unroll
    for (int u = 0; u < V; ++u) s[u] = acc[u];
    if (rs == 0 && tk != NONE && tk == run_key) {
#pragma unroll
      for (int u = 0; u < V; ++u) s[u] = fn.combine(run[u], s[u]);
    }
    for (int dd = 1; dd < R; dd <<= 1) {
      const Idx ok = __shfl_up_sync(kFull, tk, dd * G);
      A ov[V];
#pragma unroll
      for (int u = 0; u < V; ++u) ov[u] = __shfl_up_sync(kFull, s[u], dd * G);
      if (rs >= dd && tk != NONE && ok == tk) {
#pragma unroll
        for (int u = 0; u < V; ++u) s[u] = fn.combine(ov[u], s[u]);
      }
    }
    // The prefix of the lane's first segment: the slot before it, or the run.
    const Idx pk = __shfl_up_sync(kFull, tk, G);
    A pv[V];
#pragma unroll
    for (int u = 0; u < V; ++u) pv[u] = __shfl_up_sync(kFull, s[u], G);
    if (fclosed) {
      A v[V];
      const bool from_slot = rs > 0 && pk == fkey;
      const bool from_run = rs == 0 && fkey == run_key;
#pragma unroll
      for (int u = 0; u < V; ++u)
        v[u] = from_slot ? fn.combine(pv[u], pf[u]) : from_run ? fn.combine(run[u], pf[u]) : pf[u];
      complete(fkey, fqi, v);
    }
    // 4. The batch's open segment: the last slot with rows.
    const unsigned has = __ballot_sync(kFull, ck != NONE);
    const int last = (31 - __clz(int(has))) / G;  // the last row slot with rows (has != 0: the batch has rows)
    run_key = __shfl_sync(kFull, tk, last * G + lig);
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const A r = __shfl_sync(kFull, s[u], last * G + lig);
      run[u] = run_key != NONE ? r : fn.identity();
    }
  }
  // 5. Segments ending in the tile without a row in it (empty ones, or whose rows
  // all lie in earlier tiles): their partial here is the identity.
  for (Idx t = I0 + Idx(lane / G); t < I1; t += Idx(R)) {
    const Idx a = q[t], e = q[t + 1];
    if (e <= (a > J0 ? a : J0)) {
      A v[V];
#pragma unroll
      for (int u = 0; u < V; ++u) v[u] = fn.identity();
      complete(t, a, v);
    }
  }
  // 6. The carry: the partial of the segment open at the tile's end.
  if (rs == 0) {
#pragma unroll
    for (int u = 0; u < V; ++u) carry[w * inner + f0 + Idx(u)] = run[u];
  }
}

}  // namespace segred::cuda
