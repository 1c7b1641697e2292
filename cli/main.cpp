// The `segred` command: `segred paths`, `segred check [--device cpu|cuda|all] [-v]`.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/check.h"
#include "segred/segred.h"

namespace {
int usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: segred <command>\n"
               "  paths                               list every registered kernel path\n"
               "  check [--device cpu|cuda|all] [-q]  run the verification matrix against the float64\n"
               "                                      reference (default: every device present;\n"
               "                                      -q prints only wrong rows)\n"
               "  version                             print the version and the backends built\n");
  return rc;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(2);
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help") return usage(0);
  if (cmd == "version") {
    std::printf("segred %s (cpu%s)\n", segred::version, segred::built_with_cuda() ? ", cuda" : "");
    return 0;
  }
  if (cmd == "paths") {
    std::printf("%-44s %-16s %-4s %-5s %s\n", "name", "op", "dir", "back", "index");
    for (const auto& p : segred::paths())
      std::printf("%-44s %-16s %-4s %-5s i%d\n", std::string(p.name).c_str(), std::string(p.op).c_str(),
                  std::string(segred::to_string(p.direction)).c_str(),
                  std::string(segred::to_string(p.backend)).c_str(), p.index_bits);
    return 0;
  }
  if (cmd == "check") {
    std::string device = segred::cuda_device_count() > 0 ? "all" : "cpu";
    bool quiet = false;
    for (int i = 2; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
      else if (!std::strncmp(argv[i], "--device=", 9)) device = argv[i] + 9;
      else if (!std::strcmp(argv[i], "-q") || !std::strcmp(argv[i], "--quiet")) quiet = true;
      else return usage(2);
    }
    try {
      return segred::cli::run_check(device, quiet);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "segred check: %s\n", e.what());
      return 1;
    }
  }
  return usage(2);
}
