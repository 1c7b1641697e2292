// cuDNN's softmax for bench/cuda_softmax_bench.cu, loaded at run time: no cuDNN
// headers or link-time dependency (the H200 machine has cuDNN 9 only inside
// torch's pip wheel, nvidia/cudnn/lib). The few legacy-API declarations below
// follow cudnn_graph.h / cudnn_ops.h of cuDNN 9 (the enum values are stable ABI).
//
// Mode: CUDNN_SOFTMAX_ACCURATE (max-subtracted), CUDNN_SOFTMAX_MODE_CHANNEL over
// an NCHW view [N = outer, C = D, H = inner, W = 1], i.e. the softmax over C for
// every (n, h): the same function as segred's softmax over `dim`.
#pragma once
#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cudnn_bench {

using Handle = void*;
using TensorDesc = void*;
using Status = int;  // cudnnStatus_t; 0 = CUDNN_STATUS_SUCCESS
enum DataType { kFloat = 0, kDouble = 1, kHalf = 2, kBFloat16 = 9 };  // cudnnDataType_t
constexpr int kAccurate = 1;    // CUDNN_SOFTMAX_ACCURATE
constexpr int kModeChannel = 1;  // CUDNN_SOFTMAX_MODE_CHANNEL

class Softmax {
 public:
  // Tries libcudnn.so.9 in each of `dirs`, then the default library search path.
  explicit Softmax(const std::vector<std::string>& dirs) {
    std::string tried;
    for (const std::string& d : dirs) {
      if (d.empty()) continue;
      lib_ = dlopen((d + "/libcudnn.so.9").c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib_) break;
      tried += std::string(dlerror()) + "; ";
    }
    if (!lib_) lib_ = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_ = "cannot load libcudnn.so.9 (" + tried + dlerror() + ")";
      return;
    }
    if (!sym(create_, "cudnnCreate") || !sym(error_string_, "cudnnGetErrorString") ||
        !sym(version_, "cudnnGetVersion") || !sym(create_desc_, "cudnnCreateTensorDescriptor") ||
        !sym(set_desc_, "cudnnSetTensor4dDescriptor") || !sym(fwd_, "cudnnSoftmaxForward") ||
        !sym(bwd_, "cudnnSoftmaxBackward"))
      return;
    Status st = create_(&handle_);
    if (st == 0) st = create_desc_(&desc_);
    if (st != 0) {
      why_ = std::string("cudnnCreate: ") + error_string_(st);
      handle_ = nullptr;
    }
  }
  Softmax(const Softmax&) = delete;
  Softmax& operator=(const Softmax&) = delete;

  bool ok() const { return handle_ != nullptr; }
  const std::string& why() const { return why_; }
  size_t version() const { return version_ ? version_() : 0; }
  const char* error(Status s) const { return error_string_ ? error_string_(s) : "?"; }

  // Describe [outer, D, inner] (contiguous) as NCHW [outer, D, inner, 1]. cuDNN's
  // descriptor takes int sizes: returns a non-zero status beyond that.
  Status shape(DataType dt, int64_t outer, int64_t D, int64_t inner) {
    const int64_t lim = int64_t(1) << 31;
    if (outer >= lim || D >= lim || inner >= lim || outer * D * inner >= lim) return 3;  // BAD_PARAM
    return set_desc_(desc_, 0 /* NCHW */, dt, int(outer), int(D), int(inner), 1);
  }
  // y = softmax(x) over C; alpha/beta are float for float/half/bfloat16 data.
  Status forward(const void* x, void* y) const {
    const float one = 1.0f, zero = 0.0f;
    return fwd_(handle_, kAccurate, kModeChannel, &one, desc_, x, &zero, desc_, y);
  }
  // dx = y * (dy - sum(dy * y)) over C.
  Status backward(const void* y, const void* dy, void* dx) const {
    const float one = 1.0f, zero = 0.0f;
    return bwd_(handle_, kAccurate, kModeChannel, &one, desc_, y, desc_, dy, &zero, desc_, dx);
  }

 private:
  template <class F> bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib_, name));
    if (!f) why_ = std::string("libcudnn.so.9 lacks ") + name;
    return f != nullptr;
  }
  void* lib_ = nullptr;
  Handle handle_ = nullptr;
  TensorDesc desc_ = nullptr;
  std::string why_;
  Status (*create_)(Handle*) = nullptr;
  const char* (*error_string_)(Status) = nullptr;
  size_t (*version_)() = nullptr;
  Status (*create_desc_)(TensorDesc*) = nullptr;
  Status (*set_desc_)(TensorDesc, int, int, int, int, int, int) = nullptr;
  Status (*fwd_)(Handle, int, int, const void*, TensorDesc, const void*, const void*, TensorDesc, void*) = nullptr;
  Status (*bwd_)(Handle, int, int, const void*, TensorDesc, const void*, TensorDesc, const void*, const void*,
                 TensorDesc, void*) = nullptr;
};

}  // namespace cudnn_bench
