// A test's changes to the CPU kernels' process-wide knobs, undone at scope exit: the
// instruction-set cap (back to the best build, AVX-512 or what the CPU has) and the
// output size from which results are streamed (stream_store.h).
#pragma once
#include <cstdint>

#include "src/cpu/softmax_kernels.h"
#include "src/cpu/stream_store.h"

namespace segred::testing {

struct CpuKnobScope {
  int64_t stream_bytes = cpu::stream_output_bytes();
  CpuKnobScope() = default;
  CpuKnobScope(const CpuKnobScope&) = delete;
  CpuKnobScope& operator=(const CpuKnobScope&) = delete;
  ~CpuKnobScope() {
    cpu::softmax_isa_cap() = int(cpu::SoftmaxIsa::Avx512);
    cpu::stream_output_bytes() = stream_bytes;
  }
};

}  // namespace segred::testing
