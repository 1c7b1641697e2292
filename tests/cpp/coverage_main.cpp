// GoogleTest main with path coverage (shared/TESTING.md, "Every path reached").
//
// A trace listener records, for every kernel launch, which test made it. After
// the suite, every registered path of each backend that ran (CPU always; CUDA
// when a GPU is present) must have been reached, or the binary fails and prints
// the path -> tests table. Running a filtered subset (--gtest_filter) skips the
// coverage verdict, since a subset cannot be expected to reach every path.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "segred/segred.h"

namespace {
std::mutex mu;
std::map<std::string, std::set<std::string>> reached;  // path -> tests
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  segred::set_trace_listener([](const segred::TraceRecord& r) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "<outside a test>";
    std::lock_guard<std::mutex> lk(mu);
    reached[r.path].insert(test);
  });
  const int rc = RUN_ALL_TESTS();
  segred::set_trace_listener({});
  if (::testing::GTEST_FLAG(filter) != "*") return rc;

  const bool gpu = segred::cuda_device_count() > 0;
  int missing = 0;
  std::printf("\npath coverage (path -> tests that reached it)\n");
  for (const auto& p : segred::paths()) {
    if (p.backend == segred::Backend::CUDA && !gpu) continue;
    const auto it = reached.find(std::string(p.name));
    const size_t k = it == reached.end() ? 0 : it->second.size();
    std::printf("  %-44s %zu test(s)%s", std::string(p.name).c_str(), k, k ? ": " : "  UNREACHED\n");
    if (k) {
      int shown = 0;
      for (const auto& t : it->second) {
        if (shown++ == 3) { std::printf(" ..."); break; }
        std::printf("%s%s", shown > 1 ? ", " : "", t.c_str());
      }
      std::printf("\n");
    }
    if (!k) ++missing;
  }
  if (missing) std::printf("coverage FAILED: %d registered path(s) never reached\n", missing);
  return rc ? rc : (missing ? 1 : 0);
}
