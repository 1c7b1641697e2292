#include "src/core/segments.h"

#include <algorithm>
#include <cmath>

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
std::vector<int64_t> read_meta(const TensorView& m, int64_t rows, int64_t k) {
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
  normalise_offsets(op, lay, m, seg.lengths.has_value(), seg.unsafe);
  return lay;
}

void normalise_offsets(const char* op, SegmentLayout& lay, const TensorView& m, bool use_lengths, bool unsafe) {
  const int64_t k = m.sizes.back();
  // Contiguous int64 metadata is read in place; anything else is copied to int64 rows.
  std::vector<int64_t> raw;
  const bool direct = m.dtype == DType::Int64 && m.is_contiguous();
  if (!direct) raw = read_meta(m, lay.outer, k);
  const int64_t* meta = direct ? m.ptr<const int64_t>() : raw.data();
  const int64_t L = lay.L, S = lay.S;
  lay.offsets.resize(size_t(lay.outer * (S + 1)));
  for (int64_t r = 0; r < lay.outer; ++r) {
    const int64_t* in = meta + r * k;
    int64_t* o = lay.offsets.data() + r * (S + 1);
    if (use_lengths) {
      int64_t sum = 0;
      if (!unsafe) {
        for (int64_t i = 0; i < S; ++i) {
          SEGRED_CHECK(in[i] >= 0, ValueError, op, ": lengths[row ", r, "][", i, "] = ", in[i], " must be >= 0");
          // Checked before adding (0 <= sum <= L here), so that a huge length
          // cannot overflow the sum (signed overflow is undefined behaviour).
          SEGRED_CHECK(in[i] <= L - sum, ValueError, op, ": lengths[row ", r, "] must sum to data.shape[axis] = ", L,
                       ", but its first ", i + 1, " entries already sum to more (", sum, " + ", in[i], ")");
          sum += in[i];
        }
        SEGRED_CHECK(sum == L, ValueError, op, ": lengths[row ", r, "] must sum to data.shape[axis] = ", L,
                     ", got ", sum);
      }
      // Clamped running sum: every segment inside [0, L] whatever the values.
      o[0] = 0;
      for (int64_t i = 0; i < S; ++i) o[i + 1] = std::min(L, o[i] + std::clamp<int64_t>(in[i], 0, L));
    } else {
      if (!unsafe) {
        SEGRED_CHECK(in[0] >= 0, ValueError, op, ": offsets[row ", r, "][0] = ", in[0], " must be >= 0");
        for (int64_t i = 0; i < S; ++i)
          SEGRED_CHECK(in[i + 1] >= in[i], ValueError, op, ": offsets[row ", r, "] must be non-decreasing, but offsets[",
                       i + 1, "] = ", in[i + 1], " < offsets[", i, "] = ", in[i]);
        SEGRED_CHECK(in[S] <= L, ValueError, op, ": offsets[row ", r, "][-1] = ", in[S],
                     " must be <= data.shape[axis] = ", L);
      }
      o[0] = std::clamp<int64_t>(in[0], 0, L);
      for (int64_t i = 0; i < S; ++i) o[i + 1] = std::clamp<int64_t>(in[i + 1], o[i], L);
    }
  }
}

}  // namespace segred::detail
