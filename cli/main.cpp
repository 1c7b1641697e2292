// The `segred` command:
//   segred paths
//   segred check [--device cpu|cuda|all] [--large] [--report FILE] [-q]
//   segred align --device DEV [--large] [--report FILE]   (python -m segred.align; needs torch)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/check.h"
#include "segred/segred.h"

#ifndef SEGRED_PYTHON
#define SEGRED_PYTHON "python3"
#endif

namespace {
int usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: segred <command>\n"
               "  paths                      list every registered kernel path\n"
               "  check [--device cpu|cuda|all] [--large] [--report FILE] [-q]\n"
               "                             run the verification matrix through segred against the float64\n"
               "                             reference (default: every device present); --large adds the\n"
               "                             cases past 2^31 and 2^32 elements; --report writes Markdown\n"
               "                             (or JSON for *.json); -q prints only wrong rows\n"
               "  align --device DEV [--large] [--report FILE]\n"
               "                             run the same matrix through PyTorch's native ops on any torch\n"
               "                             device and report where torch diverges (needs torch)\n"
               "  version                    print the version and the backends built\n");
  return rc;
}
}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even into a file or a pipe: a long `check --large` run that is
  // killed still leaves every row it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
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
    segred::cli::CheckOptions opt;
    opt.device = segred::cuda_device_count() > 0 ? "all" : "cpu";
    for (int i = 2; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--device") && i + 1 < argc) opt.device = argv[++i];
      else if (!std::strncmp(argv[i], "--device=", 9)) opt.device = argv[i] + 9;
      else if (!std::strcmp(argv[i], "--report") && i + 1 < argc) opt.report = argv[++i];
      else if (!std::strcmp(argv[i], "--large")) opt.large = true;
      else if (!std::strcmp(argv[i], "-q") || !std::strcmp(argv[i], "--quiet")) opt.quiet = true;
      else return usage(2);
    }
    try {
      return segred::cli::run_check(opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "segred check: %s\n", e.what());
      return 1;
    }
  }
  if (cmd == "align") {
    // Written in Python (it drives torch): hand over to `python -m segred.align`.
    const char* py = std::getenv("SEGRED_PYTHON");
    std::vector<char*> args = {const_cast<char*>(py ? py : SEGRED_PYTHON), const_cast<char*>("-m"),
                               const_cast<char*>("segred.align")};
    for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "segred align: cannot run %s -m segred.align (set SEGRED_PYTHON)\n", args[0]);
    return 2;
  }
  return usage(2);
}
