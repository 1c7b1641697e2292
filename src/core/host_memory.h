// Host buffers of the owning segred::Tensor, and of the CPU benchmarks' copy baseline
// (bench/memcpy_baseline.h), so that both sides of a "% of memcpy" sit on the same kind
// of pages.
//
// From 4 MiB on, a buffer is aligned to 2 MiB and advised MADV_HUGEPAGE, as NumPy's
// allocator does on Linux (numpy >= 1.16: madvise hugepage for allocations of 4 MiB and
// more), so a segred::Tensor gets the pages a NumPy array of the same size gets. Where
// transparent huge pages are "madvise" (the Debian default) this is what turns them on;
// with "always" it changes nothing, with "never" the advice is ignored. Why it matters
// here: the strided CPU kernels (a softmax over a non-last dim reads a column whose
// values are one row apart, 32 KiB for [8192, 8192] float32) touch a new 4 KiB page per
// value and miss the TLB on most of them; a 2 MiB page covers 64 such rows.
#pragma once
#include <cstddef>
#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace segred::detail {

inline void* host_allocate(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20, kFrom = size_t(4) << 20;
  if (bytes >= kFrom) {
    const size_t n = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, n);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) (void)madvise(p, n, MADV_HUGEPAGE);  // advice only: a refusal leaves 4 KiB pages
#endif
    return p;
  }
  return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}

inline void host_free(void* p) { std::free(p); }

}  // namespace segred::detail
