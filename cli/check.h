// `segred check`: the verification matrix run through segred's public API.
#pragma once
#include <string>

namespace segred::cli {

struct CheckOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "all"
  bool large = false;          // add the boundary cases past 2^31 / 2^32 elements
  bool quiet = false;          // print only wrong rows (the report still has every row)
  std::string report;          // write the full report here: .json -> JSON, otherwise Markdown
};

// Returns the exit status: 0 when every case is right and every path of the
// devices checked was reached.
int run_check(const CheckOptions& opt);

}  // namespace segred::cli
