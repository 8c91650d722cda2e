// CublasLtGemm: the GEMMs of the cuda backend through cuBLASLt — BF16 A and B, fp32 compute and scale, D in BF16
// (activations) or fp32 (parameter gradients, attention scores), an optional bias epilogue. Each call is a
// GemmPlan (compute/gemm_plan.hpp: the column-major parameters, replayed against BLAS in the CPU tests), or one of
// its aligned parts where m, n or k is not a multiple of 8 (GemmRunner::run splits it). The
// heuristic's choice is cached per (plan, D type, epilogue, pointer alignments): the query costs tens of µs and
// runs once per shape. Where it has no algorithm with the bias epilogue, the bias is added unfused
// (unfused_bias_plans: a broadcast, then the product onto it; the same arithmetic); where it has none with an
// activation (GELU, its gradient), has_activation_kernel says so and the backend computes the activation apart.
// One 32 MiB workspace (Hopper's recommendation).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "../bf16/gemm_runner.hpp"
#include "cublaslt_descriptors.hpp"
#include "dptrain/core/memory.hpp"

namespace dptrain::cuda {

class CublasLtGemm final : public GemmRunner {
 public:
  CublasLtGemm(Memory& device_memory, cudaStream_t stream);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // No: the heuristic's choice, and with it the order of the additions, follows the operands' alignment.
  bool row_length_invariant() const override { return false; }

  static constexpr std::size_t kWorkspaceBytes = 32u << 20;

 private:
  // On the stream given at construction.
  bool run_part(const GemmPlan& plan, const void* A, const void* B, const void* C, void* D, DType d_type,
                const void* bias, const void* pre) override;
  bool has_activation_kernel(const GemmPlan& plan, const void* A, const void* B, const void* C, const void* D,
                             const void* bias, const void* pre) override;

  struct Prepared {
    CublasLtDescriptors descriptors;
    cublasLtMatmulAlgo_t algorithm{};
  };
  // The plan, D's type, and the alignments of A, B, C, D, the bias and pre (an aligned part's bias and pre may be
  // 16-byte aligned).
  using Key = std::tuple<GemmPlan, int /*d_type*/, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned>;
  // The key of a call.
  static Key key_of(const GemmPlan& plan, const void* A, const void* B, const void* C, const void* D, DType d_type,
                    const void* bias, const void* pre);
  // The cached choice for the key; null where the heuristic has none (also cached).
  const Prepared* prepare(const Key& key, const void* bias, const void* pre);
  // `count` BF16 ones on the device (the unfused bias's broadcast), grown on first need.
  const void* ones(std::size_t count);

  Memory& memory_;
  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  Buffer workspace_;
  Buffer ones_;
  std::map<Key, std::optional<Prepared>> prepared_;
};

}  // namespace dptrain::cuda
