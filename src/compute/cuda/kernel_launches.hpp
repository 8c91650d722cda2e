// The kernels of kernels/ launched on a CUDA stream (kernel_launches.cu, compiled by nvcc): the cuda backend's
// Bf16Kernels.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>

#include "../bf16/bf16_kernels.hpp"

namespace dptrain::cuda {

std::unique_ptr<Bf16Kernels> make_stream_kernels(cudaStream_t stream);

}  // namespace dptrain::cuda
