// The cuda backend as the fake CUDA runtime can run it (fake_nccl.hpp): CudaDevice (src/compute/cuda/) over the
// fake runtime, the kernels of kernels/ on the CPU harness and the GEMM plans replayed with BLAS
// (tests/kernels/cuda_on_cpu_backend.hpp), each queued on the device's compute stream, so that they run in stream
// order after the copies and event waits queued before them. Defined here, these two functions keep the real ones,
// with their kernel launches and cuBLASLt, out of the executable.
#include <functional>
#include <memory>
#include <utility>

#include "../../../src/compute/cuda/cuda_device.hpp"
#include "../../kernels/cuda_on_cpu_backend.hpp"
#include "fake_nccl.hpp"

namespace dptrain {

std::unique_ptr<Backend> make_cuda_backend(int gpu, std::string_view /*attention: the GEMM attention only*/,
                                           bool fuse_epilogues) {
  auto device = std::make_unique<cuda::CudaDevice>(gpu);
  cudaStream_t stream = device->stream();
  return test::make_harness_backend(
      "cuda", std::move(device),
      [stream](std::function<void()> work) { fake_cuda::enqueue(stream, std::move(work)); }, fuse_epilogues);
}

std::unique_ptr<Device> make_cuda_device(int gpu) { return std::make_unique<cuda::CudaDevice>(gpu); }

}  // namespace dptrain
