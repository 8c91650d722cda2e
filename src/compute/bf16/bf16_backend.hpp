// The BF16 backend: the model's operations on a device with BF16 activations and weights (read in place), fp32
// parameter gradients, fp32 master/m/v — built from a Device, the kernels of kernels/ (Bf16Kernels) and a GEMM
// runner. On a GPU these are CudaDevice, launches on its compute stream and cuBLASLt (the "cuda" backend); in the
// tests, the host device, the same kernels on the CPU harness and a BLAS replay of the same GEMM plans, so the
// backend's own code is exercised in CI.
#pragma once
#include <memory>
#include <string>

#include "bf16_kernels.hpp"
#include "dptrain/compute/backend.hpp"
#include "gemm_runner.hpp"

namespace dptrain {

// `kernels` and `gemm` work on `device` (its memory, its compute stream); the backend owns all three.
std::unique_ptr<Backend> make_bf16_backend(std::string name, std::unique_ptr<Device> device,
                                           std::unique_ptr<Bf16Kernels> kernels, std::unique_ptr<GemmRunner> gemm);

}  // namespace dptrain
