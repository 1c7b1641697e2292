#include "segred/stream.h"

namespace segred {
namespace {
thread_local void* t_stream = nullptr;
}
void* current_stream() { return t_stream; }
StreamGuard::StreamGuard(void* stream) : prev_(t_stream) { t_stream = stream; }
StreamGuard::~StreamGuard() { t_stream = prev_; }
}  // namespace segred
