#include "cli/cases.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "src/reference/segment_reduce_ref.h"

namespace segred::cli {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

Input long_segment() {
  // One segment longer than a CPU piece (2^16 rows) between two short ones, so
  // the piece split and its in-order combine are exercised; the max is tied
  // across pieces.
  Input in{"long_piece_split", 1, 0, 1, {}, {}, {"sum", "max", "min", "mean"}};
  const int64_t n = 70001;
  in.data.push_back(1.5);
  for (int64_t i = 0; i < n; ++i) in.data.push_back(double((i * 7919) % 1000) / 8.0 - 60.0);
  in.data[1 + 3] = 200.0;
  in.data[1 + 69999] = 200.0;
  in.data.push_back(-2.0);
  in.data.push_back(4.0);
  in.L = int64_t(in.data.size());
  in.lengths = {1, n, 2};
  return in;
}
}  // namespace

const std::vector<Input>& inputs() {
  static const std::vector<Input> all = [] {
    std::vector<Input> v = {
        // name, outer, L, inner, data, lengths
        {"tie_two", 1, 7, 1, {1, 3, 3, 2, 5, 5, 0}, {4, 2, 1}},
        {"tie_all", 1, 4, 1, {2, 2, 2, 2}, {4}},
        {"tie_signed_zero", 1, 4, 1, {-0.0, 0.0, -1, 0.0}, {4}},
        {"tie_inf", 1, 5, 1, {kInf, kInf, 1, -kInf, -kInf}, {3, 2}},
        {"nan", 1, 6, 1, {1, kNaN, 3, kNaN, kNaN, -kInf}, {3, 3}},
        {"empty_segments", 1, 3, 1, {1.5, -2, 3}, {0, 2, 0, 0, 1, 0}},
        {"zeros_prod", 1, 6, 1, {0, 2, 0, -3, 0.5, 0}, {3, 3}},
        {"features_tie", 1, 4, 3, {1, 2, 3, 1, -2, 3, 0, 2, -3, 1, 2, 3}, {3, 1}},
        {"batched_axis1", 2, 5, 2, {1, 2, 2, 1, 3, 3, -1, 0, 0, 4,
                                    7, 7, 7, 7, 1, 2, 0, 0, 5, -5}, {2, 0, 3, 1, 4, 0}},
        // offsets {1, 3, 5} over 6 elements: the first and last lie outside every segment
        {"lead_and_tail", 1, 6, 1, {9, 1, 4, 4, -3, 9}, {2, 2}, {}, 1},
    };
    v.push_back(long_segment());
    for (auto& in : v)
      if (in.reduces.empty()) in.reduces = {"sum", "mean", "max", "min", "prod"};
    return v;
  }();
  return all;
}

std::vector<Case> expand_cases(const std::vector<Input>& in) {
  const std::vector<double> grads = {-2.5, -1.0, 0.0, 1.0, 2.5};
  std::vector<Case> out;
  for (const Input& i : in) {
    for (const std::string& red : i.reduces) {
      const bool tie_op = red == "max" || red == "min";
      const std::vector<std::string> ties = tie_op ? std::vector<std::string>{"split", "first", "last"}
                                                   : std::vector<std::string>{"split"};
      for (bool offsets : {false, true}) {
        if (i.lead > 0 && !offsets) continue;  // offsets-only input (gaps at both ends)
        for (const std::string& tie : ties)
          for (double g : grads)
            for (const char* dt : {"float64", "float32"}) {
              Case c{"", &i, red, offsets, std::nullopt, tie, g, false, dt};
              out.push_back(c);
            }
        // initial, and a per-segment mix of gradient signs, in float64.
        for (double init : {0.5, -kInf}) {
          if (init == -kInf && red != "max") continue;
          Case c{"", &i, red, offsets, init, "split", -2.5, false, "float64"};
          out.push_back(c);
        }
        Case mix{"", &i, red, offsets, std::nullopt, "split", -2.5, true, "float64"};
        out.push_back(mix);
      }
    }
  }
  for (Case& c : out) {
    c.name = c.input->name + "/" + c.reduce + "/" + (c.offsets ? "offsets" : "lengths");
    if (c.initial) c.name += "/initial=" + (std::isinf(*c.initial) ? std::string("-inf") : std::to_string(*c.initial).substr(0, 4));
    if (c.reduce == "max" || c.reduce == "min") c.name += "/tie=" + c.tie;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", c.grad);
    c.name += std::string(c.grad_varied ? "/g=mixed*" : "/g=") + buf;
    c.name += "/" + c.dtype;
  }
  return out;
}

namespace {
double round_to(double v, const std::string& dtype) { return dtype == "float32" ? double(float(v)) : v; }
}  // namespace

Materialized materialize(const Case& c) {
  const Input& in = *c.input;
  Materialized m;
  const int64_t S = int64_t(in.lengths.size()) / in.outer;
  m.axis = in.outer > 1 ? 1 : 0;
  m.data_shape = in.outer > 1 ? Shape{in.outer, in.L} : Shape{in.L};
  if (in.inner > 1) m.data_shape.push_back(in.inner);
  m.out_shape = m.data_shape;
  m.out_shape[size_t(m.axis)] = S;
  for (double v : in.data) m.data.push_back(round_to(v, c.dtype));
  reference::Problem p{in.outer, in.L, in.inner, S, reference::offsets_from_lengths(in.lengths, in.outer, S),
                       c.initial};
  for (auto& v : p.offsets) v += in.lead;
  m.meta_shape = in.outer > 1 ? Shape{in.outer, S} : Shape{S};
  if (c.offsets) {
    m.meta_shape.back() += 1;
    m.meta = p.offsets;
  } else {
    m.meta = in.lengths;
  }
  m.expected_out = reference::forward(p, m.data, c.reduce);
  // Upstream gradient: c.grad everywhere, or a per-segment pattern of every sign.
  static const double pattern[] = {1.0, -1.0, 0.0, 0.4};
  for (size_t i = 0; i < m.expected_out.size(); ++i)
    m.grad.push_back(round_to(c.grad_varied ? c.grad * pattern[(i / size_t(in.inner)) % 4] : c.grad, c.dtype));
  std::vector<double> y = m.expected_out;
  for (auto& v : y) v = round_to(v, c.dtype);
  m.expected_grad = reference::backward(p, m.grad, y, m.data, c.reduce, c.tie);
  if (c.reduce == "max" || c.reduce == "min") {
    // PyTorch's rule: split among the k ties only when g > 0, else each tie gets g.
    std::vector<double> gpos(m.grad.size()), gneg(m.grad.size());
    for (size_t i = 0; i < m.grad.size(); ++i) {
      gpos[i] = m.grad[i] > 0 ? m.grad[i] : 0.0;
      gneg[i] = m.grad[i] > 0 ? 0.0 : m.grad[i];
    }
    const auto split = reference::backward(p, gpos, y, m.data, c.reduce, "split");
    // every tied element of a g <= 0 segment receives the whole g: k copies
    std::vector<double> ones(m.grad.size(), 1.0);
    const auto share = reference::backward(p, ones, y, m.data, c.reduce, "split");  // 1/k on ties
    const auto neg_split = reference::backward(p, gneg, y, m.data, c.reduce, "split");
    m.grad_sign_defect.resize(split.size());
    for (size_t i = 0; i < split.size(); ++i)
      m.grad_sign_defect[i] = split[i] + (share[i] != 0 ? neg_split[i] / share[i] : 0.0);
  }
  return m;
}

}  // namespace segred::cli
