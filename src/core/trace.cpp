// The launch trace: a process-wide log that is appended to only while at least
// one TraceSession is active (a relaxed atomic check keeps untraced launches cheap).
#include <atomic>
#include <mutex>

#include "segred/trace.h"

namespace segred {

namespace {
std::mutex g_mu;
std::vector<TraceRecord> g_log;
std::atomic<int> g_active{0};
std::function<void(const TraceRecord&)> g_listener;
std::atomic<bool> g_has_listener{false};
}  // namespace

TraceSession::TraceSession() {
  std::lock_guard<std::mutex> lk(g_mu);
  begin_ = g_log.size();
  g_active.fetch_add(1);
}

TraceSession::~TraceSession() { stop(); }

void TraceSession::stop() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!active_) return;
  active_ = false;
  if (g_active.fetch_sub(1) == 1) g_log.clear();  // nobody can see older records any more
}

std::vector<TraceRecord> TraceSession::records() const {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!active_) return {};
  return {g_log.begin() + std::ptrdiff_t(begin_), g_log.end()};
}

void set_trace_listener(std::function<void(const TraceRecord&)> listener) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_listener = std::move(listener);
  g_has_listener.store(bool(g_listener));
}

namespace detail {
void record_launch(std::string_view path, std::array<int64_t, 3> grid, std::array<int64_t, 3> block,
                   std::string_view variant) {
  if (g_active.load(std::memory_order_relaxed) == 0 && !g_has_listener.load(std::memory_order_relaxed)) return;
  const PathInfo& info = path_info(path);
  TraceRecord r{std::string(info.op), info.direction, info.backend, std::string(info.name), info.index_bits, grid, block,
                std::string(variant)};
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_listener) g_listener(r);
  if (g_active.load() > 0) g_log.push_back(std::move(r));
}
}  // namespace detail

}  // namespace segred
