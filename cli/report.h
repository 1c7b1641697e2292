// Rows of a verification run, the coverage table, and their printing as a
// terminal table, Markdown or JSON; a progress bar for long runs.
#pragma once
#include <cstdio>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "segred/tensor.h"

namespace segred::cli {

std::string device_name(DeviceRef d);  // "cpu" / "cuda"
// Whether this build registers a path of one of `ops` on `dev`'s backend (a case
// family runs on a device only then).
bool has_paths_for(DeviceRef dev, std::initializer_list<std::string_view> ops);

struct Row {
  std::string name;    // case name
  std::string op;      // "segment_reduce", "softmax", ...
  std::string device;  // "cpu" / "cuda"
  std::string paths;   // comma-separated paths the case reached
  double err = 0;      // max scaled error
  std::string verdict; // "ok", "WRONG", "skipped"
  std::string detail;  // first mismatch, or why skipped
};

// One expected value checked: NaN must meet NaN, infinities must be equal, finite
// values within `tol` of the scaled error |got - want| / (1 + |want|), whose
// maximum is kept in `err`. Every verification row uses this rule.
bool close_enough(double got, double want, double tol, double& err);

struct CoverageLine {
  std::string path, backend;
  std::vector<std::string> cases;
};

void print_row_header();
void print_row(const Row& r);
// Writes the report; .json -> JSON, otherwise Markdown.
bool write_report(const std::string& file, const std::vector<Row>& rows, const std::vector<CoverageLine>& cov,
                  const std::string& summary);

// Draws "[#####     ] 12/40 name" on stderr when it is a terminal; no-op otherwise.
class Progress {
 public:
  explicit Progress(size_t total);
  void step(const std::string& what);
  ~Progress();

 private:
  size_t total_, done_ = 0;
  bool tty_;
};

}  // namespace segred::cli
