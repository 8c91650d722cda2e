// The cuBLASLt descriptors of one GEMM plan (compute/gemm_plan.hpp): the operation (fp32 compute and scale, the
// transposes, the epilogue: a bias on a BF16 vector, GELU or its gradient with a BF16 pre of D's ld) and the layouts
// of A and B (BF16) and of C = D (BF16 or fp32), strided-batched where the plan is. Creating them needs no GPU, so a
// CPU test asks cuBLASLt itself whether it takes every plan of the model and reads back what it was told
// (tests/compute/cublaslt_descriptors_test.cpp).
#pragma once
#include <cublasLt.h>

#include "dptrain/compute/gemm_plan.hpp"

namespace dptrain::cuda {

class CublasLtDescriptors {
 public:
  // Throws std::invalid_argument for a plan gemm_plan_problem() finds wrong, and on any status but success.
  CublasLtDescriptors(const GemmPlan& plan, cudaDataType_t d_type);
  ~CublasLtDescriptors();
  CublasLtDescriptors(CublasLtDescriptors&& other) noexcept;
  CublasLtDescriptors(const CublasLtDescriptors&) = delete;
  CublasLtDescriptors& operator=(const CublasLtDescriptors&) = delete;
  CublasLtDescriptors& operator=(CublasLtDescriptors&&) = delete;

  cublasLtMatmulDesc_t operation() const { return operation_; }
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t d() const { return d_; }  // C and D alike: the product is in place

 private:
  void release() noexcept;

  cublasLtMatmulDesc_t operation_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

}  // namespace dptrain::cuda
