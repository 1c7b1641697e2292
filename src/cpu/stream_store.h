// Non-temporal output for write-only tensors larger than the caches.
//
// An ordinary store to a line that is not in cache first reads the line
// (read-for-ownership), so a kernel that only writes its output moves twice the
// output's bytes; memcpy avoids this with non-temporal (streaming) stores. The
// backward of segment_reduce writes grad_input (the size of data) and reads
// little else for sum/mean, so without streaming it cannot pass ~55% of memcpy.
//
// StagedOutput lets a kernel keep its ordinary store loops: it hands out a
// cache-resident stage for each output range, and when the next range does not
// continue the current one (or the stage is full) the staged bytes leave with
// 64-byte-aligned streaming stores. Ranges larger than the stage are written in
// place. One per thread; flush() (which also fences the streaming stores) before
// the thread's writes must be visible.
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace segred::cpu {

// Outputs at least this large are streamed (well past a core's share of the LLC).
// A variable so that tests can force the streaming path on small outputs.
inline int64_t& stream_output_bytes() {
  static int64_t bytes = int64_t(8) << 20;
  return bytes;
}

// memcpy with streaming stores for the 64-byte-aligned lines of dst.
inline void stream_copy(void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t head = size_t(-reinterpret_cast<uintptr_t>(d)) & 63u;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  const size_t body = n & ~size_t(63);
  for (size_t i = 0; i < body; i += 64)
    for (size_t k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + k)));
  std::memcpy(d + body, s + body, n - body);
#else
  std::memcpy(dst, src, n);
#endif
}

inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

template <class T>
class StagedOutput {
 public:
  // enabled = false: every range is written in place (small outputs stay cached).
  // The stage has kSlack elements past its capacity: a kernel may write up to
  // kSlack elements past the n it asked for (vector stores that run into the next
  // range, which rewrites them, or past the end, which is never copied out).
  static constexpr int64_t kSlack = 64;
  explicit StagedOutput(bool enabled, int64_t capacity = int64_t(1) << 16)
      : on_(enabled), cap_(enabled ? capacity : 0), buf_(enabled ? size_t(capacity + kSlack) : 0) {}
  StagedOutput(StagedOutput&& o) noexcept
      : on_(o.on_), cap_(o.cap_), buf_(std::move(o.buf_)), dst0_(o.dst0_), len_(o.len_) {
    o.len_ = 0;
  }
  StagedOutput& operator=(StagedOutput&&) = delete;
  ~StagedOutput() { flush(); }

  // Where to write the n elements destined for dst[0, n).
  T* target(T* dst, int64_t n) {
    if (!on_ || n > cap_) {
      flush();
      return dst;
    }
    if (len_ > 0 && (dst != dst0_ + len_ || len_ + n > cap_)) flush();
    if (len_ == 0) dst0_ = dst;
    T* w = buf_.data() + len_;
    len_ += n;
    return w;
  }

  void flush() {
    if (len_ == 0) return;
    stream_copy(dst0_, buf_.data(), size_t(len_) * sizeof(T));
    stream_fence();
    len_ = 0;
  }

 private:
  bool on_;
  int64_t cap_;
  std::vector<T> buf_;
  T* dst0_ = nullptr;
  int64_t len_ = 0;
};

}  // namespace segred::cpu
