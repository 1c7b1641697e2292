#include "cli/large.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "segred/dtype.h"
#include "src/core/device_memory.h"

namespace segred::cli {

namespace {

// The storage bits of v in `dtype` (es bytes, little end first).
uint64_t bits_of(double v, DType dtype) {
  uint64_t b = 0;
  switch (dtype) {
    case DType::Float16: {
      const half_t h = store<half_t>(float(v));
      std::memcpy(&b, &h, 2);
      break;
    }
    case DType::BFloat16: {
      const bfloat16_t h = store<bfloat16_t>(float(v));
      std::memcpy(&b, &h, 2);
      break;
    }
    case DType::Float32: {
      const float f = float(v);
      std::memcpy(&b, &f, 4);
      break;
    }
    default:
      std::memcpy(&b, &v, 8);
  }
  return b;
}

// The value stored at p (memcpy: p may point into a uint64_t or any byte buffer).
double value_of(const void* p, DType dtype) {
  switch (dtype) {
    case DType::Float16: {
      half_t h;
      std::memcpy(&h, p, 2);
      return double(load(h));
    }
    case DType::BFloat16: {
      bfloat16_t h;
      std::memcpy(&h, p, 2);
      return double(load(h));
    }
    case DType::Float32: {
      float f;
      std::memcpy(&f, p, 4);
      return double(f);
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

template <class U>
void fill_host(void* data, int64_t n, uint64_t bits) {
  U* p = static_cast<U*>(data);
  const U v = U(bits);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

}  // namespace

double FilledArray::at(int64_t i) const {
  double v = fill;
  for (const Patch& p : patches)
    if (p.at == i) v = p.v;
  return v;
}

namespace {
// The first integer in `path`, or -1 ("max" and missing files give -1).
int64_t read_int(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (!f) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}
// The value of `key` in a memory.stat file ("key value" lines), or 0.
int64_t stat_value(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char name[128];
  long long v = 0, found = 0;
  while (std::fscanf(f, "%127s %lld", name, &v) == 2)
    if (!std::strcmp(name, key)) found = v;
  std::fclose(f);
  return found;
}
}  // namespace

int64_t free_bytes(DeviceRef dev) {
  if (dev.type == Device::CUDA) return detail::cuda_free_bytes(dev.index);
  int64_t free = int64_t(sysconf(_SC_AVPHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  // In a container the memory cgroup's limit, not the host's free pages, decides
  // when the kernel kills the process: take the smaller (cgroup v2, then v1). The
  // cgroup's usage counts the page cache; its inactive part is reclaimed before a
  // kill, so it counts as free.
  struct Cgroup {
    const char *limit, *usage, *stat, *inactive_key;
  };
  const Cgroup cg[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "inactive_file"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
       "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"}};
  for (const Cgroup& c : cg) {
    const int64_t limit = read_int(c.limit), usage = read_int(c.usage);
    if (limit > 0 && usage >= 0 && limit < (int64_t(1) << 60))
      free = std::min(free, limit - std::max<int64_t>(0, usage - stat_value(c.stat, c.inactive_key)));
  }
  return free;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(int64_t(1) << 30));
  return buf;
}

std::string memory_shortfall(DeviceRef dev, int64_t need) {
  const int64_t slack = dev.type == Device::CUDA ? int64_t(1) << 30 : 0;
  const int64_t have = free_bytes(dev);
  if (need + slack <= have) return "";
  return "needs " + gib(need) + ", " + gib(have) + " free on " + (dev.type == Device::CUDA ? "cuda" : "cpu");
}

bool skip_if_short(Row& row, DeviceRef dev, int64_t need) {
  const std::string short_of = memory_shortfall(dev, need);
  if (short_of.empty()) return false;
  row.verdict = "skipped";
  row.detail = short_of;
  return true;
}

double round_to_dtype(double v, DType dtype) {
  const uint64_t b = bits_of(v, dtype);
  return value_of(&b, dtype);
}

Tensor make_filled(const Shape& shape, DType dtype, const FilledArray& a, DeviceRef dev) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  const int64_t n = t.numel();
  const size_t es = size_t(dtype_size(dtype));
  char* base = static_cast<char*>(t.data());
  const uint64_t fill = bits_of(a.fill, dtype);
  if (n > 0) {
    if (dev.type == Device::CPU) {
      if (es == 2) fill_host<uint16_t>(base, n, fill);
      else if (es == 4) fill_host<uint32_t>(base, n, fill);
      else fill_host<uint64_t>(base, n, fill);
    } else {
      // One element from the host, then [0, k) -> [k, 2k) until the end.
      detail::cuda_copy(base, &fill, es);
      for (int64_t k = 1; k < n; k *= 2)
        detail::cuda_copy(base + size_t(k) * es, base, size_t(std::min(k, n - k)) * es);
    }
  }
  for (const Patch& p : a.patches) {
    if (p.at < 0 || p.at >= n) continue;
    const uint64_t b = bits_of(p.v, dtype);
    if (dev.type == Device::CPU) std::memcpy(base + size_t(p.at) * es, &b, es);
    else detail::cuda_copy(base + size_t(p.at) * es, &b, es);
  }
  return t;
}

std::vector<double> read_elements(const TensorView& t, const std::vector<int64_t>& at) {
  const size_t es = size_t(dtype_size(t.dtype));
  const char* base = static_cast<const char*>(t.data);
  std::vector<double> out;
  out.reserve(at.size());
  for (int64_t i : at) {
    uint64_t b = 0;
    if (t.device.type == Device::CPU) std::memcpy(&b, base + size_t(i) * es, es);
    else detail::cuda_copy(&b, base + size_t(i) * es, es);
    out.push_back(value_of(&b, t.dtype));
  }
  return out;
}

std::vector<int64_t> boundary_points(int64_t n, const std::vector<int64_t>& extra) {
  const int64_t k31 = int64_t(1) << 31, k32 = int64_t(1) << 32;
  std::vector<int64_t> v = {0, 1, 2, 3, n / 2, n - 4, n - 3, n - 2, n - 1, k31 - 1, k31, k32 - 1, k32};
  v.insert(v.end(), extra.begin(), extra.end());
  std::vector<int64_t> out;
  for (int64_t i : v)
    if (i >= 0 && i < n) out.push_back(i);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace segred::cli
