// The cuda backend: the BF16 backend on one GPU — CudaDevice, the kernels launched on its compute stream, and
// cuBLASLt.
#include "../bf16/bf16_backend.hpp"
#include "cublaslt_gemm.hpp"
#include "cuda_device.hpp"
#include "kernel_launches.hpp"

namespace dptrain {

std::unique_ptr<Backend> make_cuda_backend(int gpu) {
  auto device = std::make_unique<cuda::CudaDevice>(gpu);
  auto kernels = cuda::make_stream_kernels(device->stream());
  auto gemm = std::make_unique<cuda::CublasLtGemm>(*device, device->stream());
  return make_bf16_backend("cuda", std::move(device), std::move(kernels), std::move(gemm));
}

std::unique_ptr<Device> make_cuda_device(int gpu) { return std::make_unique<cuda::CudaDevice>(gpu); }

}  // namespace dptrain
