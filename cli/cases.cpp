#include "cli/cases.h"

#include <cmath>
#include <limits>

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
  const std::vector<double> grads = {-1.0, 0.0, 1.0, 2.5};
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

}  // namespace segred::cli
