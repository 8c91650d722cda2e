// The cuda backend: the BF16 backend on one GPU — CudaDevice, the kernels launched on its compute stream,
// cuBLASLt, and cuDNN's fused attention where the build has cuDNN.
#include <fmt/format.h>

#include "../bf16/bf16_backend.hpp"
#include "cublaslt_gemm.hpp"
#include "cuda_device.hpp"
#include "dptrain/core/error.hpp"
#include "kernel_launches.hpp"
#ifdef DPTRAIN_HAVE_CUDNN
#include "../cudnn/cudnn_attention.hpp"
#endif

namespace dptrain {

namespace {

// cuDNN's attention on the compute stream, unless --attention gemm. Where cuDNN cannot start, "auto" goes on
// without it (the GEMM attention) and "fused" is a UserError naming cuDNN's reason.
std::unique_ptr<FusedAttention> fused_attention([[maybe_unused]] cudaStream_t stream, std::string_view attention) {
  if (attention == "gemm") return nullptr;
#ifdef DPTRAIN_HAVE_CUDNN
  try {
    return cuda::make_cudnn_attention(stream);
  } catch (const std::exception& e) {
    if (attention == "fused") throw UserError(fmt::format("--attention fused: {}", e.what()));
    fmt::print(stderr, "dptrain: cuDNN's fused attention cannot start ({}); attention by GEMMs\n", e.what());
  }
#endif
  return nullptr;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int gpu, std::string_view attention, bool fuse_epilogues) {
  auto device = std::make_unique<cuda::CudaDevice>(gpu);
  auto kernels = cuda::make_stream_kernels(device->stream());
  auto gemm = std::make_unique<cuda::CublasLtGemm>(*device, device->stream());
  auto fused = fused_attention(device->stream(), attention);
  return make_bf16_backend("cuda", std::move(device), std::move(kernels), std::move(gemm), std::move(fused),
                           std::string(attention), fuse_epilogues);
}

std::unique_ptr<Device> make_cuda_device(int gpu) { return std::make_unique<cuda::CudaDevice>(gpu); }

}  // namespace dptrain
