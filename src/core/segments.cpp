#include "src/core/segments.h"

#include <algorithm>
#include <omp.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "segred/error.h"

namespace segred::detail {

int64_t wrap_axis(const char* op, const char* argname, int64_t axis, int64_t ndim) {
  SEGRED_CHECK(axis >= -ndim && axis < ndim, ValueError, op, ": ", argname, "=", axis,
               " is out of range for a tensor of ", ndim, " dims (expected ", -ndim, " <= ", argname, " < ", ndim,
               ")");
  return axis < 0 ? axis + ndim : axis;
}

void check_initial(const char* op, double initial, DType dtype) {
  if (!std::isfinite(initial)) return;  // +-inf and NaN exist in every float dtype
  double rounded = initial;
  // Beyond float's range the conversion to float is undefined behaviour: decide first.
  if (dtype != DType::Float64 && std::fabs(initial) > double(std::numeric_limits<float>::max())) rounded = INFINITY;
  else switch (dtype) {
    case DType::Float32: rounded = double(float(initial)); break;
    case DType::Float16: rounded = double(to_float(to_half(float(initial)))); break;
    case DType::BFloat16: rounded = double(to_float(to_bfloat16(float(initial)))); break;
    default: break;
  }
  SEGRED_CHECK(std::isfinite(rounded), ValueError, op, ": initial=", initial, " is not representable in ",
               dtype_name(dtype), " (it would become infinite)");
}

namespace {
// Reads metadata (any strides, int32 or int64) as int64 rows of `k` values.
// (noinline: inlined into normalise_offsets, GCC 12 reports a false -Wfree-nonheap-object.)
[[gnu::noinline]] std::vector<int64_t> read_meta(const TensorView& m, int64_t rows, int64_t k) {
  std::vector<int64_t> out(size_t(rows * k));
  const int64_t nd = m.ndim();
  std::vector<int64_t> idx(size_t(nd), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    for (int64_t d = 0; d + 1 < nd; ++d) base += idx[size_t(d)] * m.strides[size_t(d)];
    const int64_t st = m.strides[size_t(nd - 1)];
    for (int64_t i = 0; i < k; ++i) {
      const int64_t off = base + i * st;
      out[size_t(r * k + i)] = m.dtype == DType::Int32 ? int64_t(m.ptr<int32_t>()[off]) : m.ptr<int64_t>()[off];
    }
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < m.sizes[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}
}  // namespace

SegmentLayout resolve_layout(const char* op, const TensorView& data, const Segments& seg) {
  SegmentLayout lay;
  SEGRED_CHECK(is_floating(data.dtype), TypeError, op, ": data has dtype ", dtype_name(data.dtype),
               "; expected float32, float64, float16 or bfloat16");
  SEGRED_CHECK(data.ndim() >= 1, ValueError, op, ": data must have at least 1 dim, got a 0-dim tensor");
  SEGRED_CHECK(seg.lengths.has_value() != seg.offsets.has_value(), ValueError, op,
               seg.lengths ? ": pass exactly one of lengths and offsets, not both"
                           : ": one of lengths or offsets is required");
  const bool use_lengths = seg.lengths.has_value();
  const char* mname = use_lengths ? "lengths" : "offsets";
  const TensorView& m = use_lengths ? *seg.lengths : *seg.offsets;
  SEGRED_CHECK(is_index(m.dtype), TypeError, op, ": ", mname, " has dtype ", dtype_name(m.dtype),
               "; expected int32 or int64");
  SEGRED_CHECK(m.device == data.device, ValueError, op, ": ", mname, " is on ", to_string(m.device),
               " but data is on ", to_string(data.device), "; both must be on the same device");
  lay.index_dtype = m.dtype;
  lay.axis = wrap_axis(op, "axis", seg.axis, data.ndim());
  SEGRED_CHECK(m.ndim() == lay.axis + 1, ValueError, op, ": ", mname, " must have ndim == axis + 1 = ", lay.axis + 1,
               " (one row of segments per index of data.shape[:axis]), got shape ", shape_string(m.sizes));
  for (int64_t d = 0; d < lay.axis; ++d)
    SEGRED_CHECK(m.sizes[size_t(d)] == data.sizes[size_t(d)], ValueError, op, ": ", mname, ".shape[:-1] = ",
                 shape_string(Shape(m.sizes.begin(), m.sizes.end() - 1)), " must equal data.shape[:axis] = ",
                 shape_string(Shape(data.sizes.begin(), data.sizes.begin() + lay.axis)));
  const int64_t k = m.sizes.back();
  SEGRED_CHECK(use_lengths || k >= 1, ValueError, op, ": offsets.shape[-1] must be >= 1 (S + 1 offsets), got 0");
  lay.S = use_lengths ? k : k - 1;
  lay.L = data.sizes[size_t(lay.axis)];
  for (int64_t d = 0; d < lay.axis; ++d) lay.outer *= data.sizes[size_t(d)];
  for (int64_t d = lay.axis + 1; d < data.ndim(); ++d) lay.inner *= data.sizes[size_t(d)];
  if (seg.initial) check_initial(op, *seg.initial, data.dtype);
  return lay;
}

SegmentLayout resolve_segments(const char* op, const TensorView& data, const Segments& seg) {
  SegmentLayout lay = resolve_layout(op, data, seg);
  const TensorView& m = seg.lengths ? *seg.lengths : *seg.offsets;
  SEGRED_CHECK(m.device.type == Device::CPU, ValueError, op, ": ", seg.lengths ? "lengths" : "offsets",
               " on CUDA is not supported by this backend yet");
  normalise_offsets(op, lay, m, seg.lengths.has_value(), seg.unsafe, OffsetStorage::Borrow);
  return lay;
}

namespace {

// The serial definition: validates (unless unsafe), throwing the message for the
// first invalid entry, and writes the clamped offsets of row r to o (S + 1 values).
// The parallel pass below computes the same offsets and calls this only to report
// an error.
template <class I>
void normalise_row_serial(const char* op, int64_t r, const I* in, int64_t L, int64_t S, bool use_lengths, bool unsafe,
                          int64_t* o) {
  if (use_lengths) {
    int64_t sum = 0;
    if (!unsafe) {
      for (int64_t i = 0; i < S; ++i) {
        const int64_t v = in[i];
        SEGRED_CHECK(v >= 0, ValueError, op, ": lengths[row ", r, "][", i, "] = ", v, " must be >= 0");
        // Checked before adding (0 <= sum <= L here), so that a huge length
        // cannot overflow the sum (signed overflow is undefined behaviour).
        SEGRED_CHECK(v <= L - sum, ValueError, op, ": lengths[row ", r, "] must sum to data.shape[axis] = ", L,
                     ", but its first ", i + 1, " entries already sum to more (", sum, " + ", v, ")");
        sum += v;
      }
      SEGRED_CHECK(sum == L, ValueError, op, ": lengths[row ", r, "] must sum to data.shape[axis] = ", L, ", got ",
                   sum);
    }
    // Clamped running sum: every segment inside [0, L] whatever the values.
    o[0] = 0;
    for (int64_t i = 0; i < S; ++i) o[i + 1] = std::min(L, o[i] + std::clamp<int64_t>(in[i], 0, L));
  } else {
    if (!unsafe) {
      SEGRED_CHECK(in[0] >= 0, ValueError, op, ": offsets[row ", r, "][0] = ", int64_t(in[0]), " must be >= 0");
      for (int64_t i = 0; i < S; ++i)
        SEGRED_CHECK(in[i + 1] >= in[i], ValueError, op, ": offsets[row ", r, "] must be non-decreasing, but offsets[",
                     i + 1, "] = ", int64_t(in[i + 1]), " < offsets[", i, "] = ", int64_t(in[i]));
      SEGRED_CHECK(in[S] <= L, ValueError, op, ": offsets[row ", r, "][-1] = ", int64_t(in[S]),
                   " must be <= data.shape[axis] = ", L);
    }
    o[0] = std::clamp<int64_t>(in[0], 0, L);
    for (int64_t i = 0; i < S; ++i) o[i + 1] = std::clamp<int64_t>(in[i + 1], o[i], L);
  }
}

// Below this many metadata values one thread does it all (waking the team costs
// more than the pass).
constexpr int64_t kParallelMeta = int64_t(1) << 16;

// Calls f(c, r, i0, i1) for chunk c of `chunks` equal parts of the flattened
// [rows, k] index space, split at row boundaries into (row r, [i0, i1)) pieces.
template <class F>
void for_chunk_pieces(int64_t rows, int64_t k, int64_t c, int64_t chunks, F&& f) {
  const int64_t total = rows * k, per = (total + chunks - 1) / chunks;
  const int64_t b = std::min(total, c * per), e = std::min(total, b + per);
  int64_t r = k ? b / k : 0, i = b - r * k, pos = b;
  while (pos < e) {
    const int64_t i1 = std::min(k, i + (e - pos));
    f(r, i, i1);
    pos += i1 - i;
    ++r;
    i = 0;
  }
}

// Offsets of every row, as the serial definition, on all threads. Output row r has
// S + 1 values o[r][i] = clamp(scan_r(v)[i]) where, with cap = L (unsafe) or L + 1
// (validating: a sum past L then shows as a last offset != L):
//   lengths: v[0] = 0, v[i] = clamp(len[i-1], 0, cap), scan = saturating sum (<= cap);
//   offsets: v[i] = in[i], scan = running max, then clamp to [0, L].
// Both operators are associative, so a blocked segmented scan (row starts reset the
// carry) gives the serial result. Returns false if the metadata is invalid
// (validating only); the caller then runs the serial pass for the message.
template <bool kLengths, bool kUnsafe, class I>
bool normalise_parallel(const I* in, int64_t rows, int64_t k, int64_t L, int64_t S, int64_t* out) {
  const int64_t K = S + 1, cap = kUnsafe ? L : L + 1;
  auto value = [&](const I* row, int64_t i) -> int64_t {
    if constexpr (!kLengths) return row[i];
    else return i == 0 ? 0 : std::clamp<int64_t>(row[i - 1], 0, cap);
  };
  auto combine = [&](int64_t a, int64_t b) {
    if constexpr (kLengths) return std::min(cap, a + b);
    else return std::max(a, b);
  };
  constexpr int64_t ident = kLengths ? 0 : std::numeric_limits<int64_t>::min();
  const int chunks = std::max(1, omp_get_max_threads()) * 4;
  std::vector<int64_t> agg(size_t(chunks), ident);
  std::vector<char> head(size_t(chunks), 0);  // chunk holds a row start: no carry passes through it
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok)
  for (int c = 0; c < chunks; ++c) {
    int64_t acc = ident;
    bool good = true;
    for_chunk_pieces(rows, K, c, chunks, [&](int64_t r, int64_t i0, int64_t i1) {
      const I* row = in + r * k;
      if (i0 == 0) {
        acc = ident;
        head[size_t(c)] = 1;
      }
      for (int64_t i = i0; i < i1; ++i) acc = combine(acc, value(row, i));
      if constexpr (!kUnsafe) {  // the element-wise rules; the row-end rules come in the second pass
        const int64_t j0 = std::max<int64_t>(i0, 1);
        if constexpr (kLengths)
          for (int64_t i = j0; i < i1; ++i) good &= row[i - 1] >= 0;
        else
          for (int64_t i = j0; i < i1; ++i) good &= row[i] >= row[i - 1];
      }
    });
    agg[size_t(c)] = acc;
    ok = ok && good;
  }
  if (!ok) return false;
  // Carry into each chunk: the combined aggregate of the chunks since the last head.
  std::vector<int64_t> carry(size_t(chunks), ident);
  for (int c = 1; c < chunks; ++c)
    carry[size_t(c)] = head[size_t(c - 1)] ? agg[size_t(c - 1)] : combine(carry[size_t(c - 1)], agg[size_t(c - 1)]);
#pragma omp parallel for schedule(static) reduction(&& : ok)
  for (int c = 0; c < chunks; ++c) {
    int64_t acc = carry[size_t(c)];
    for_chunk_pieces(rows, K, c, chunks, [&](int64_t r, int64_t i0, int64_t i1) {
      const I* row = in + r * k;
      if (i0 == 0) acc = ident;
      int64_t* o = out + r * K;
      for (int64_t i = i0; i < i1; ++i) {
        acc = combine(acc, value(row, i));
        o[i] = kLengths ? acc : std::clamp<int64_t>(acc, 0, L);
      }
      if (kUnsafe || i1 != K) return;  // validation at the row's last offset
      if (kLengths ? acc != L : (row[0] < 0 || row[S] > L)) ok = false;
    });
  }
  return ok;
}

// Lengths that are valid (every rule of normalise_row_serial holds), the common
// case, in one fused pass: per length one load, one add, one store and one OR, no
// clamps, no branches (normalise_parallel above costs ~7x the instructions: two
// scans, each with a clamp and a saturating add per value). The OR of the lengths, m,
// proves them all in [0, m] with m <= INT64_MAX / S (one unsigned compare per
// chunk; a negative length sets the sign bit, so it fails too): then the running
// sums of a row are exact and non-decreasing, and a row whose sum is L has every
// offset in [0, L], so the clamped offsets of the serial definition are the plain
// running sums. Returns false where a rule may fail (a negative length, a row not
// summing to L; or lengths so large that m > INT64_MAX / S, valid or not): out is
// then partly written, and the caller runs the general pass (which rewrites all of
// it, or throws the serial pass's message).
// Large metadata: one chunk per thread, each scans its part with local sums (a row
// start resets them); then each chunk adds the carry of the chunks before it (a
// vector add, on its part before its first row start only) and checks the sums at
// its rows' ends.
template <class I>
bool lengths_valid_scan(const I* in, int64_t rows, int64_t S, int64_t L, int64_t* out) {
  if (S < 1 || rows < 1) return false;
  const int64_t K = S + 1;
  const uint64_t max_len = uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(S);
  // Lengths [i0, i1) of row r: out[r][i + 1] = acc + in[r][i0] + ... + in[r][i];
  // returns the new acc and ORs the lengths into m.
  auto scan = [in, out, S, K](int64_t r, int64_t i0, int64_t i1, uint64_t acc, uint64_t& m) {
    const I* row = in + r * S;
    int64_t* o = out + r * K + 1;
    uint64_t b = 0;
#pragma GCC unroll 4
    for (int64_t i = i0; i < i1; ++i) {
      const uint64_t v = uint64_t(int64_t(row[i]));
      b |= v;
      acc += v;  // unsigned: a bad length wraps instead of overflowing (and fails anyway)
      o[i] = int64_t(acc);
    }
    m |= b;
    return acc;
  };
  const int64_t total = rows * S;
  const int chunks = total >= kParallelMeta ? std::max(1, omp_get_max_threads()) : 1;
  if (chunks == 1) {
    uint64_t m = 0;
    bool ends = true;
    for (int64_t r = 0; r < rows; ++r) {
      out[r * K] = 0;
      ends &= int64_t(scan(r, 0, S, 0, m)) == L;
    }
    return ends && m <= max_len;
  }
  std::vector<int64_t> agg(size_t(chunks), 0);
  std::vector<char> head(size_t(chunks), 0);  // chunk holds a row start: no carry passes through it
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok)
  for (int c = 0; c < chunks; ++c) {
    uint64_t acc = 0, m = 0;
    for_chunk_pieces(rows, S, c, chunks, [&](int64_t r, int64_t i0, int64_t i1) {
      if (i0 == 0) {
        acc = 0;
        head[size_t(c)] = 1;
        out[r * K] = 0;
      }
      acc = scan(r, i0, i1, acc, m);
    });
    agg[size_t(c)] = int64_t(acc);
    ok = ok && m <= max_len;
  }
  if (!ok) return false;
  // Carry into each chunk: the sum of the chunks since the last row start (exact:
  // within one row, <= S * max_len <= INT64_MAX).
  std::vector<int64_t> carry(size_t(chunks), 0);
  for (int c = 1; c < chunks; ++c)
    carry[size_t(c)] = head[size_t(c - 1)] ? agg[size_t(c - 1)] : carry[size_t(c - 1)] + agg[size_t(c - 1)];
#pragma omp parallel for schedule(static) reduction(&& : ok)
  for (int c = 0; c < chunks; ++c) {
    int64_t add = carry[size_t(c)];
    for_chunk_pieces(rows, S, c, chunks, [&](int64_t r, int64_t i0, int64_t i1) {
      int64_t* o = out + r * K + 1;
      if (i0 == 0) add = 0;  // a row start: the sums are already the row's
      if (add != 0)
        for (int64_t i = i0; i < i1; ++i) o[i] += add;
      if (i1 == S && o[S - 1] != L) ok = false;  // the row's end: its sum must be L
    });
  }
  return ok;
}

// Whether contiguous int64 offsets are already valid (then they are used in place).
bool offsets_valid(const int64_t* in, int64_t rows, int64_t K, int64_t L) {
  bool ok = true;
  const int chunks = rows * K >= kParallelMeta ? std::max(1, omp_get_max_threads()) : 1;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (chunks > 1)
  for (int c = 0; c < chunks; ++c)
    for_chunk_pieces(rows, K, c, chunks, [&](int64_t r, int64_t i0, int64_t i1) {
      const int64_t* o = in + r * K;
      bool good = o[i0] >= 0 && o[i1 - 1] <= L && (i0 == 0 || o[i0] >= o[i0 - 1]);
      for (int64_t i = i0 + 1; i < i1; ++i) good &= o[i] >= o[i - 1];
      ok = ok && good;
    });
  return ok;
}

std::vector<int64_t>& thread_scratch() {
  thread_local std::vector<int64_t> buf;
  return buf;
}

}  // namespace

// Test hook (declared by tests/cpp/test_segment_metadata.cpp, not in segments.h):
// calls of normalise_offsets on this thread whose lengths took lengths_valid_scan.
int64_t& fused_lengths_calls();
int64_t& fused_lengths_calls() {
  thread_local int64_t n = 0;
  return n;
}

void normalise_offsets(const char* op, SegmentLayout& lay, const TensorView& m, bool use_lengths, bool unsafe,
                       OffsetStorage storage) {
  const int64_t k = m.sizes.back();
  const int64_t L = lay.L, S = lay.S, rows = lay.outer, K = S + 1;
  // Contiguous int64 offsets that are already valid need no pass at all.
  const bool contiguous = m.is_contiguous() && (m.dtype == DType::Int64 || m.dtype == DType::Int32);
  if (storage == OffsetStorage::Borrow && contiguous && m.dtype == DType::Int64 && !use_lengths &&
      offsets_valid(m.ptr<const int64_t>(), rows, K, L)) {
    lay.borrowed = m.ptr<const int64_t>();
    return;
  }
  int64_t* out;
  if (storage == OffsetStorage::Borrow) {
    auto& buf = thread_scratch();
    if (buf.size() < size_t(rows * K)) buf.resize(size_t(rows * K));
    out = buf.data();
    lay.borrowed = out;
  } else {
    lay.offsets.resize(size_t(rows * K));
    out = lay.offsets.data();
  }
  // Anything but contiguous int32/int64 is first copied to int64 rows.
  std::vector<int64_t> raw;
  if (!contiguous) raw = read_meta(m, rows, k);
  auto run = [&](auto* in) {
    // Lengths: the fused pass for valid ones first (validating or not: valid
    // lengths give the same offsets either way); anything else falls through.
    if (use_lengths && lengths_valid_scan(in, rows, k, L, out)) {
      ++fused_lengths_calls();
      return;
    }
    if (rows * k >= kParallelMeta) {
      const auto f = use_lengths ? (unsafe ? normalise_parallel<true, true, std::remove_cvref_t<decltype(*in)>>
                                           : normalise_parallel<true, false, std::remove_cvref_t<decltype(*in)>>)
                                 : (unsafe ? normalise_parallel<false, true, std::remove_cvref_t<decltype(*in)>>
                                           : normalise_parallel<false, false, std::remove_cvref_t<decltype(*in)>>);
      if (f(in, rows, k, L, S, out)) return;
    }
    for (int64_t r = 0; r < rows; ++r)  // small, or invalid: the serial pass (throws on invalid)
      normalise_row_serial(op, r, in + r * k, L, S, use_lengths, unsafe, out + r * K);
  };
  if (!contiguous) run(static_cast<const int64_t*>(raw.data()));
  else if (m.dtype == DType::Int64) run(m.ptr<const int64_t>());
  else run(m.ptr<const int32_t>());
}

}  // namespace segred::detail
