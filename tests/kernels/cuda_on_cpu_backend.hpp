// The cuda backend's code on the CPU: the BF16 backend (src/compute/bf16/) over the host device, the kernels of
// kernels/ run by the CPU harness with the launch shapes the backend uses on a GPU, and the GEMM plans replayed with
// cblas_sgemm on the BF16 operands (rounding D once, as cuBLASLt does). Everything of the cuda backend but the CUDA
// runtime and cuBLASLt themselves runs in CI this way, against the cpu backend.
#pragma once
#include <memory>

#include "dptrain/compute/backend.hpp"

namespace dptrain::test {

inline constexpr const char* kCudaOnCpu = "cuda_kernels_on_cpu";
std::unique_ptr<Backend> make_cuda_on_cpu_backend();

}  // namespace dptrain::test
