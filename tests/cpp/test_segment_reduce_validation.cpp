// segment_reduce validation (SEMANTICS.md): every rule broken once, asserting the
// exception type (segred::ValueError vs segred::TypeError) and that the message
// names the argument; a failed call leaves caller-provided outputs untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "tests/cpp/segment_reduce_test_util.h"

namespace segred::testing {
namespace {

// Runs f, expects exception E whose what() contains every word of `names`.
template <class E>
void expect_error(const std::function<void()>& f, std::initializer_list<const char*> names) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const char* n : names) EXPECT_NE(msg.find(n), std::string::npos) << "message '" << msg << "' lacks '" << n << "'";
    // Both kinds are segred::Error and std::invalid_argument.
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
    EXPECT_NE(dynamic_cast<const std::invalid_argument*>(&e), nullptr);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}
#define EXPECT_VALUE_ERROR(stmt, ...) expect_error<ValueError>([&] { stmt; }, {__VA_ARGS__})
#define EXPECT_TYPE_ERROR(stmt, ...) expect_error<TypeError>([&] { stmt; }, {__VA_ARGS__})

struct Fixture {
  Tensor x = make_tensor({1, 2, 3, 4, 5, 6}, {6}, DType::Float32);
  Tensor x2 = make_tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6}, DType::Float32);
  Tensor len = make_index({2, 4}, {2}, DType::Int64);
  Tensor len2 = make_index({2, 4, 6, 0}, {2, 2}, DType::Int32);
  Tensor off = make_index({0, 2, 6}, {3}, DType::Int64);
  Segments by_len() const {
    Segments s;
    s.lengths = len.view();
    return s;
  }
  Segments by_off() const {
    Segments s;
    s.offsets = off.view();
    return s;
  }
};

TEST(SegmentReduceValidation, BadReduce) {
  EXPECT_VALUE_ERROR(parse_reduce("median"), "reduce", "median", "sum", "amax");
  EXPECT_VALUE_ERROR(parse_reduce(""), "reduce");
  EXPECT_VALUE_ERROR(parse_reduce("Sum"), "reduce");
}

TEST(SegmentReduceValidation, BadTie) {
  EXPECT_VALUE_ERROR(parse_tie("middle"), "tie", "middle", "split", "first", "last");
}

TEST(SegmentReduceValidation, AliasesParse) {
  EXPECT_EQ(parse_reduce("amax"), Reduce::Max);
  EXPECT_EQ(parse_reduce("amin"), Reduce::Min);
  for (const char* r : {"sum", "mean", "max", "min", "prod"}) EXPECT_EQ(to_string(parse_reduce(r)), r);
  for (const char* t : {"split", "first", "last"}) EXPECT_EQ(to_string(parse_tie(t)), t);
}

TEST(SegmentReduceValidation, NeitherLengthsNorOffsets) {
  Fixture f;
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, Segments{}), "lengths", "offsets");
}

TEST(SegmentReduceValidation, BothLengthsAndOffsets) {
  Fixture f;
  Segments s = f.by_len();
  s.offsets = f.off.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "lengths", "offsets", "both");
}

TEST(SegmentReduceValidation, AxisOutOfRange) {
  Fixture f;
  for (int64_t axis : {1, 2, -2, -100}) {
    Segments s = f.by_len();
    s.axis = axis;
    EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "axis");
  }
}

TEST(SegmentReduceValidation, MetaNdimNotAxisPlusOne) {
  Fixture f;
  Segments s;
  s.lengths = f.len2.view();  // 2-D lengths with axis 0
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Sum, s), "lengths", "ndim");
  Segments o;
  o.offsets = f.off.view();  // 1-D offsets with axis 1
  o.axis = 1;
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Sum, o), "offsets", "ndim");
}

TEST(SegmentReduceValidation, MetaLeadingDimsMismatch) {
  Fixture f;
  const Tensor len3 = make_index({2, 4, 6, 0, 3, 3}, {3, 2}, DType::Int64);  // 3 rows for data.shape[0] = 2
  Segments s;
  s.lengths = len3.view();
  s.axis = 1;
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Sum, s), "lengths", "shape");
  const Tensor off1 = make_index({0, 6}, {1, 2}, DType::Int64);
  Segments o;
  o.offsets = off1.view();
  o.axis = -1;
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Max, o), "offsets", "shape");
}

TEST(SegmentReduceValidation, NegativeLength) {
  Fixture f;
  const Tensor len = make_index({-1, 7}, {2}, DType::Int64);
  Segments s;
  s.lengths = len.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "lengths", ">= 0");
  // Batched: the row is named.
  const Tensor len2 = make_index({2, 4, 7, -1}, {2, 2}, DType::Int32);
  Segments b;
  b.lengths = len2.view();
  b.axis = 1;
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Sum, b), "lengths", "row 1");
}

TEST(SegmentReduceValidation, LengthsSumNotL) {
  Fixture f;
  for (std::vector<int64_t> v : {std::vector<int64_t>{2, 3}, std::vector<int64_t>{2, 5}, std::vector<int64_t>{int64_t(1) << 62, int64_t(1) << 62},
                             // would overflow a running int64 sum (UBSan in CI)
                             std::vector<int64_t>{1, std::numeric_limits<int64_t>::max()},
                             std::vector<int64_t>{6, std::numeric_limits<int64_t>::max()}}) {
    const Tensor len = make_index(v, {2}, DType::Int64);
    Segments s;
    s.lengths = len.view();
    EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "lengths", "sum");
  }
  Segments b;
  b.lengths = f.len2.view();  // row 1 sums to 6, row 0 to 6: fine; break row 1
  b.axis = 1;
  const Tensor bad = make_index({2, 4, 6, 1}, {2, 2}, DType::Int32);
  b.lengths = bad.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Sum, b), "lengths", "row 1", "sum");
}

TEST(SegmentReduceValidation, OffsetsDecreasing) {
  Fixture f;
  const Tensor off = make_index({0, 4, 2, 6}, {4}, DType::Int64);
  Segments s;
  s.offsets = off.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "offsets", "non-decreasing");
}

TEST(SegmentReduceValidation, OffsetsStartNegative) {
  Fixture f;
  const Tensor off = make_index({-1, 2, 6}, {3}, DType::Int32);
  Segments s;
  s.offsets = off.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "offsets", ">= 0");
}

TEST(SegmentReduceValidation, OffsetsEndPastL) {
  Fixture f;
  const Tensor off = make_index({0, 2, 7}, {3}, DType::Int64);
  Segments s;
  s.offsets = off.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "offsets", "<=");
  const Tensor off2 = make_index({0, 6, 0, 7}, {2, 2}, DType::Int64);
  Segments b;
  b.offsets = off2.view();
  b.axis = 1;
  EXPECT_VALUE_ERROR(segment_reduce(f.x2, Reduce::Sum, b), "offsets", "row 1");
}

TEST(SegmentReduceValidation, EmptyOffsets) {
  Fixture f;
  const Tensor off = make_index({}, {0}, DType::Int64);
  Segments s;
  s.offsets = off.view();
  EXPECT_VALUE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "offsets");
}

TEST(SegmentReduceValidation, IntegerDataIsTypeError) {
  Fixture f;
  for (DType t : {DType::Int32, DType::Int64}) {
    const Tensor xi = make_index({1, 2, 3, 4, 5, 6}, {6}, t);
    EXPECT_TYPE_ERROR(segment_reduce(xi, Reduce::Sum, f.by_len()), "data", dtype_name(t).data());
  }
}

TEST(SegmentReduceValidation, FloatMetadataIsTypeError) {
  Fixture f;
  const Tensor lf = make_tensor({2, 4}, {2}, DType::Float32);
  Segments s;
  s.lengths = lf.view();
  EXPECT_TYPE_ERROR(segment_reduce(f.x, Reduce::Sum, s), "lengths", "float32");
  const Tensor of = make_tensor({0, 2, 6}, {3}, DType::Float64);
  Segments o;
  o.offsets = of.view();
  EXPECT_TYPE_ERROR(segment_reduce(f.x, Reduce::Sum, o), "offsets", "float64");
}

TEST(SegmentReduceValidation, InitialNotRepresentable) {
  const Tensor len = make_index({3}, {1}, DType::Int64);
  for (double init : {1e10, 70000.0, -65520.0}) {
    const Tensor x = filled({3}, DType::Float16, 1.0);
    Segments s;
    s.lengths = len.view();
    s.initial = init;
    EXPECT_VALUE_ERROR(segment_reduce(x, Reduce::Sum, s), "initial", "float16");
  }
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const Tensor x = filled({3}, t, 1.0);
    Segments s;
    s.lengths = len.view();
    s.initial = 1e300;
    EXPECT_VALUE_ERROR(segment_reduce(x, Reduce::Max, s), "initial");
  }
  // Representable boundaries are accepted.
  const Tensor x = filled({3}, DType::Float16, 1.0);
  Segments s;
  s.lengths = len.view();
  s.initial = 65504.0;
  EXPECT_EQ(to_vec(segment_reduce(x, Reduce::Max, s)), (std::vector<double>{65504.0}));
  s.initial = 1e10;
  const Tensor xb = filled({3}, DType::BFloat16, 1.0);
  EXPECT_NO_THROW(segment_reduce(xb, Reduce::Max, s));
}

TEST(SegmentReduceValidation, ZeroDimData) {
  const Tensor x = filled({}, DType::Float32, 1.0);
  const Tensor len = make_index({1}, {1}, DType::Int64);
  Segments s;
  s.lengths = len.view();
  EXPECT_VALUE_ERROR(segment_reduce(x, Reduce::Sum, s), "data");
}

TEST(SegmentReduceValidation, OutShapeDtypeContiguityOverlap) {
  Fixture f;
  Tensor out = filled({3}, DType::Float32, 7.0);  // expected [2]
  EXPECT_VALUE_ERROR(segment_reduce_out(f.x, Reduce::Sum, f.by_len(), out), "out", "shape");
  EXPECT_EQ(to_vec(out), (std::vector<double>{7, 7, 7})) << "a failed call must not write its output";
  Tensor outd = filled({2}, DType::Float64, 7.0);
  EXPECT_TYPE_ERROR(segment_reduce_out(f.x, Reduce::Sum, f.by_len(), outd), "out", "dtype");
  Tensor buf = filled({4}, DType::Float32, 7.0);
  const TensorView strided(buf.data(), DType::Float32, {2}, {2});
  EXPECT_VALUE_ERROR(segment_reduce_out(f.x, Reduce::Sum, f.by_len(), strided), "out", "contiguous");
  // out aliasing data (its first two elements).
  const TensorView alias(f.x.data(), DType::Float32, {2});
  EXPECT_VALUE_ERROR(segment_reduce_out(f.x, Reduce::Sum, f.by_len(), alias), "out", "overlap");
  Tensor big = filled({7}, DType::Float32, 1.0);
  const TensorView tail(big.ptr<float>() + 5, DType::Float32, {2});
  const TensorView head(big.ptr<float>(), DType::Float32, {6});
  EXPECT_VALUE_ERROR(segment_reduce_out(head, Reduce::Sum, f.by_len(), tail), "out", "overlap");
  EXPECT_EQ(to_vec(f.x), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(SegmentReduceValidation, BackwardGradShapeMismatch) {
  Fixture f;
  const Tensor y = segment_reduce(f.x, Reduce::Sum, f.by_len());
  const Tensor g3 = filled({3}, DType::Float32, 1.0);
  EXPECT_VALUE_ERROR(segment_reduce_backward(g3, y, f.x, Reduce::Sum, f.by_len()), "grad", "shape");
  const Tensor y3 = filled({3}, DType::Float32, 1.0);
  const Tensor g = filled({2}, DType::Float32, 1.0);
  EXPECT_VALUE_ERROR(segment_reduce_backward(g, y3, f.x, Reduce::Sum, f.by_len()), "output", "shape");
  const Tensor gd = filled({2}, DType::Float64, 1.0);
  EXPECT_TYPE_ERROR(segment_reduce_backward(gd, y, f.x, Reduce::Sum, f.by_len()), "grad", "dtype");
}

TEST(SegmentReduceValidation, BackwardOutShapeAndOverlap) {
  Fixture f;
  const Tensor y = segment_reduce(f.x, Reduce::Max, f.by_len());
  const Tensor g = filled({2}, DType::Float32, -1.0);
  Tensor gi5 = filled({5}, DType::Float32, 7.0);
  EXPECT_VALUE_ERROR(segment_reduce_backward_out(g, y, f.x, Reduce::Max, f.by_len(), Tie::Split, gi5), "grad_input",
                     "shape");
  EXPECT_EQ(to_vec(gi5), (std::vector<double>(5, 7.0)));
  Tensor gib = filled({6}, DType::BFloat16, 7.0);
  EXPECT_TYPE_ERROR(segment_reduce_backward_out(g, y, f.x, Reduce::Max, f.by_len(), Tie::Split, gib), "grad_input",
                    "dtype");
  Tensor gx = Tensor::contiguous_copy(f.x);
  EXPECT_VALUE_ERROR(segment_reduce_backward_out(g, y, gx, Reduce::Max, f.by_len(), Tie::Split, gx), "grad_input",
                     "overlap");
  EXPECT_VALUE_ERROR(segment_reduce_backward_out(g, y, f.x, Reduce::Max, f.by_len(), Tie::Split,
                                                 TensorView(g.data(), DType::Float32, {6})),
                     "grad_input", "overlap");
  // Validation of the metadata happens in the backward too.
  const Tensor bad = make_index({2, 3}, {2}, DType::Int64);
  Segments s;
  s.lengths = bad.view();
  EXPECT_VALUE_ERROR(segment_reduce_backward(g, y, f.x, Reduce::Max, s), "lengths", "sum");
  EXPECT_VALUE_ERROR(segment_reduce_backward(g, y, f.x, Reduce::Max, Segments{}), "lengths", "offsets");
}

TEST(SegmentReduceValidation, OutputShapeQuery) {
  Fixture f;
  EXPECT_EQ(segment_reduce_output_shape(f.x, f.by_len()), (Shape{2}));
  EXPECT_EQ(segment_reduce_output_shape(f.x, f.by_off()), (Shape{2}));
  Segments b;
  b.lengths = f.len2.view();
  b.axis = 1;
  EXPECT_EQ(segment_reduce_output_shape(f.x2, b), (Shape{2, 2}));
}

}  // namespace
}  // namespace segred::testing
