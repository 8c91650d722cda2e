// Bf16Kernels on a CUDA stream: each kernel launched with `<<<>>>` in the shape its kernel file computes, and the
// launch checked at once (a bad configuration fails at its call, not at the next synchronisation).
#include "../bf16/kernel_calls.hpp"
#include "cuda_check.hpp"
#include "kernel_launches.hpp"

namespace dptrain::cuda {

namespace {

struct StreamLauncher {
  cudaStream_t stream;
  template <typename Kernel, typename... Args>
  void operator()(const kernels::Launch& l, Kernel kernel, Args... args) const {
    kernel<<<l.grid, l.block, l.shared_bytes, stream>>>(args...);
    DP_CUDA(cudaGetLastError());
  }
};

}  // namespace

std::unique_ptr<Bf16Kernels> make_stream_kernels(cudaStream_t stream) {
  return std::make_unique<KernelCalls<StreamLauncher>>(StreamLauncher{stream});
}

}  // namespace dptrain::cuda
