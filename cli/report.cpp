#include "cli/report.h"

#include "segred/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace segred::cli {

std::string device_name(DeviceRef d) { return d.type == Device::CPU ? "cpu" : "cuda"; }

bool has_paths_for(DeviceRef dev, std::initializer_list<std::string_view> ops) {
  const Backend b = dev.type == Device::CPU ? Backend::CPU : Backend::CUDA;
  for (const auto& p : paths())
    if (p.backend == b)
      for (std::string_view op : ops)
        if (p.op == op) return true;
  return false;
}

bool close_enough(double got, double want, double tol, double& err) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  const double e = std::fabs(got - want) / (1.0 + std::fabs(want));
  err = std::max(err, e);
  return e <= tol;
}

void print_row_header() {
  std::printf("%-60s %-6s %-40s %-9s %s\n", "case", "device", "path", "max err", "verdict");
}

void print_row(const Row& r) {
  std::printf("%-60s %-6s %-40s %-9.2e %s%s%s\n", r.name.c_str(), r.device.c_str(), r.paths.c_str(), r.err,
              r.verdict.c_str(), r.detail.empty() ? "" : ": ", r.detail.c_str());
}

namespace {
std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') { o += "\\n"; continue; }
    o += c;
  }
  return o + "\"";
}
}  // namespace

bool write_report(const std::string& file, const std::vector<Row>& rows, const std::vector<CoverageLine>& cov,
                  const std::string& summary) {
  std::ofstream f(file);
  if (!f) return false;
  const bool json = file.size() >= 5 && file.substr(file.size() - 5) == ".json";
  if (json) {
    f << "{\n  \"summary\": " << json_str(summary) << ",\n  \"cases\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << "    {\"case\": " << json_str(r.name) << ", \"op\": " << json_str(r.op) << ", \"device\": "
        << json_str(r.device) << ", \"paths\": " << json_str(r.paths) << ", \"max_err\": " << r.err
        << ", \"verdict\": " << json_str(r.verdict) << ", \"detail\": " << json_str(r.detail) << "}"
        << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    f << "  ],\n  \"coverage\": [\n";
    for (size_t i = 0; i < cov.size(); ++i) {
      f << "    {\"path\": " << json_str(cov[i].path) << ", \"backend\": " << json_str(cov[i].backend)
        << ", \"cases\": " << cov[i].cases.size() << "}" << (i + 1 < cov.size() ? ",\n" : "\n");
    }
    f << "  ]\n}\n";
  } else {
    f << "# segred check report\n\n" << summary << "\n\n| case | device | path | max err | verdict |\n|---|---|---|---|---|\n";
    for (const Row& r : rows) {
      char err[32];
      std::snprintf(err, sizeof err, "%.2e", r.err);
      f << "| " << r.name << " | " << r.device << " | " << r.paths << " | " << err << " | " << r.verdict
        << (r.detail.empty() ? "" : ": " + r.detail) << " |\n";
    }
    f << "\n## Path coverage\n\n| path | backend | cases that reached it | e.g. |\n|---|---|---|---|\n";
    for (const auto& c : cov)
      f << "| " << c.path << " | " << c.backend << " | " << c.cases.size() << " | "
        << (c.cases.empty() ? "UNREACHED" : c.cases.front()) << " |\n";
  }
  return bool(f);
}

Progress::Progress(size_t total) : total_(total), tty_(isatty(2)) {}

void Progress::step(const std::string& what) {
  ++done_;
  if (!tty_) return;
  const int width = 30;
  const int fill = total_ ? int(width * done_ / total_) : width;
  std::fprintf(stderr, "\r[%s%s] %zu/%zu %-50.50s", std::string(size_t(fill), '#').c_str(),
               std::string(size_t(width - fill), ' ').c_str(), done_, total_, what.c_str());
  std::fflush(stderr);
}

Progress::~Progress() {
  if (tty_ && done_) std::fprintf(stderr, "\r%100s\r", "");
}

}  // namespace segred::cli
