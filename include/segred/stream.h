// segred/stream.h: the CUDA stream segred's launches go to.
//
// CUDA work runs on the calling thread's current segred stream: the default
// stream unless a StreamGuard is alive on this thread. Framework bindings set it
// to the caller's stream (torch's or CuPy's current stream, or `stream=`), so
// segred orders itself with the caller's work and never synchronises the device
// (except to read metadata back for validation, see segment_reduce.h).
#pragma once

namespace segred {

// The calling thread's current stream (a cudaStream_t; nullptr = default stream).
void* current_stream();

// Sets the calling thread's stream for its lifetime; restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(void* stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  void* prev_;
};

}  // namespace segred
