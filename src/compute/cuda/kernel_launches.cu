// Bf16Kernels on a CUDA stream: each kernel launched with `<<<>>>` in the shape its kernel file computes, and the
// launch checked at once (a bad configuration fails at its call, not at the next synchronisation), naming the
// operation and the launch's shape. With DPTRAIN_CUDA_SYNC=1 each kernel is also waited for, so that a fault in
// it is reported at its own launch.
#include "../bf16/kernel_calls.hpp"
#include "cuda_check.hpp"
#include "kernel_launches.hpp"

namespace dptrain::cuda {

namespace {

struct StreamLauncher {
  cudaStream_t stream;
  template <typename Kernel, typename... Args>
  void operator()(const char* operation, const kernels::Launch& l, Kernel kernel, Args... args) const {
    kernel<<<l.grid, l.block, l.shared_bytes, stream>>>(args...);
    cudaError_t error = cudaGetLastError();
    if (error == cudaSuccess && synchronize_each_call()) error = cudaStreamSynchronize(stream);
    if (error != cudaSuccess) throw_kernel_error(error, operation, l.grid, l.block, l.shared_bytes);
  }
};

}  // namespace

std::unique_ptr<Bf16Kernels> make_stream_kernels(cudaStream_t stream) {
  return std::make_unique<KernelCalls<StreamLauncher>>(StreamLauncher{stream});
}

}  // namespace dptrain::cuda
