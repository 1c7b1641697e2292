// segred/trace.h: the path registry and the launch trace (SEMANTICS.md, "Trace").
//
// Every kernel path a build contains is listed once in the registry with a
// stable, unique name "<op>.<direction>.<backend>.<variant>.i<bits>", e.g.
// "segment_reduce.fwd.cpu.flat.i64". Every launch is recorded while tracing is
// on, so tests can prove which path ran, and a coverage test can prove that
// every registered path was reached.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace segred {

enum class Backend : uint8_t { CPU, CUDA };
enum class Direction : uint8_t { Fwd, Bwd };

std::string_view to_string(Backend b);
std::string_view to_string(Direction d);

struct PathInfo {
  std::string_view name;  // stable, unique
  std::string_view op;    // "segment_reduce", "softmax", ...
  Direction direction;
  Backend backend;
  int index_bits;  // 32 or 64
};

// Every path compiled into this build (CUDA paths only when built with CUDA).
const std::vector<PathInfo>& paths();
// Registry lookup; throws ValueError for an unknown name.
const PathInfo& path_info(std::string_view name);

struct TraceRecord {
  std::string op;
  Direction direction;
  Backend backend;
  std::string path;
  int index_bits;
  std::array<int64_t, 3> grid{0, 0, 0};   // CUDA launches only
  std::array<int64_t, 3> block{0, 0, 0};  // CUDA launches only
  // The choice inside the path this launch made, where the path has one
  // (Plan::variant: segment_reduce's CUDA flat forward records "fused_fixup" or
  // "fixup_tree" on its flat_reduce launch; its feature forward "half_vectors"
  // where it reads rows in 8-byte vectors); empty otherwise.
  std::string variant;
};

// Records launches from construction until destruction (or stop()). Sessions
// nest; each sees the launches made while it was active. Thread-safe.
class TraceSession {
 public:
  TraceSession();
  ~TraceSession();
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;
  // Launches recorded since this session began (a copy).
  std::vector<TraceRecord> records() const;
  void stop();

 private:
  size_t begin_;
  bool active_ = true;
};

// Called for every launch, traced or not: used by test harnesses to build the
// path -> tests coverage table. Pass an empty function to remove.
void set_trace_listener(std::function<void(const TraceRecord&)> listener);

namespace detail {
// Kernels call this once per launch with the registered path name.
void record_launch(std::string_view path, std::array<int64_t, 3> grid = {0, 0, 0},
                   std::array<int64_t, 3> block = {0, 0, 0}, std::string_view variant = {});
}  // namespace detail

}  // namespace segred
