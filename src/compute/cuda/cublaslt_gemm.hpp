// CublasLtGemm: the GEMMs of the cuda backend through cuBLASLt — BF16 A and B, fp32 compute and scale, D in BF16
// (activations) or fp32 (parameter gradients, attention scores), an optional bias epilogue. Each call is a
// GemmPlan (compute/gemm_plan.hpp: the column-major parameters, replayed against BLAS in the CPU tests). The
// heuristic's choice is cached per (plan, D type, epilogue, pointer alignments): the query costs tens of µs and
// runs once per shape. One 32 MiB workspace (Hopper's recommendation).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <tuple>

#include "dptrain/compute/gemm_plan.hpp"
#include "dptrain/core/memory.hpp"

namespace dptrain::cuda {

class CublasLtGemm {
 public:
  explicit CublasLtGemm(Memory& device_memory);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // A tensor of the backend's operation by its role; the plan says which role is A, which B and which C = D.
  struct Tensor {
    GemmOperand role;
    const void* data;  // D's is written
  };
  // D = plan.alpha·op(A)·op(B) + plan.beta·D (+ bias[m] broadcast over columns where plan.bias_epilogue), on
  // `stream`. A and B are BF16; D (and the C it accumulates) is BF16 or fp32 (d_type); bias BF16.
  void run(const GemmPlan& plan, std::initializer_list<Tensor> tensors, cudaDataType_t d_type, cudaStream_t stream,
           const void* bias = nullptr);

  static constexpr std::size_t kWorkspaceBytes = 32u << 20;

 private:
  struct Prepared {
    cublasLtMatmulDesc_t operation = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algorithm{};
  };
  using Key = std::tuple<GemmPlan, int /*d_type*/, unsigned, unsigned, unsigned /*alignments of A, B, D*/>;
  const Prepared& prepare(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  Buffer workspace_;
  std::map<Key, Prepared> prepared_;
};

}  // namespace dptrain::cuda
