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
#include "fused_attention.hpp"
#include "gemm_runner.hpp"

namespace dptrain {

// `kernels`, `gemm` and `fused` work on `device` (its memory, its compute stream); the backend owns them all.
// Attention is `fused` where `attention` (backend.hpp's kAttentionModes) is "fused", or "auto" and `fused` takes
// the model's heads; else the GEMMs and softmax kernels. fused may be null (no fused attention here): "fused" is
// then refused (UserError) when the model is laid out, as is a shape `fused` does not take. fuse_epilogues: the
// MLP's GELU and the residual adds in the GEMMs' epilogues (else the composition, Backend's).
std::unique_ptr<Backend> make_bf16_backend(std::string name, std::unique_ptr<Device> device,
                                           std::unique_ptr<Bf16Kernels> kernels, std::unique_ptr<GemmRunner> gemm,
                                           std::unique_ptr<FusedAttention> fused = nullptr,
                                           std::string attention = "gemm", bool fuse_epilogues = true);

}  // namespace dptrain
