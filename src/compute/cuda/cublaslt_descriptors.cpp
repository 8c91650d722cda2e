// A GEMM plan as cuBLASLt's operation and matrix layouts.
#include "cublaslt_descriptors.hpp"

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "cuda_check.hpp"

namespace dptrain::cuda {

namespace {

cublasLtMatrixLayout_t matrix_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                     std::int64_t batch, std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  DP_CUDA(cublasLtMatrixLayoutCreate(&layout, type, std::uint64_t(rows), std::uint64_t(cols), ld));
  if (batch > 1) {
    const std::int32_t count = std::int32_t(batch);  // the attribute is an int32_t; the offset an int64_t
    DP_CUDA(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    DP_CUDA(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof stride));
  }
  return layout;
}

cublasOperation_t op(GemmOp o) { return o == GemmOp::T ? CUBLAS_OP_T : CUBLAS_OP_N; }

cublasLtEpilogue_t epilogue_of(const GemmPlan& plan) {
  switch (plan.activation) {
    case GemmActivation::none:
      return plan.bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case GemmActivation::gelu:
      return plan.bias_epilogue ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmActivation::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;  // no bias (gemm_plan_problem)
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

CublasLtDescriptors::CublasLtDescriptors(const GemmPlan& plan, cudaDataType_t d_type) {
  if (const std::string problem = gemm_plan_problem(plan); !problem.empty())
    throw std::invalid_argument("cuBLASLt: " + problem);
  if (plan.batch > INT32_MAX) throw std::invalid_argument("cuBLASLt: a batch count beyond int32");
  try {
    DP_CUDA(cublasLtMatmulDescCreate(&operation_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transa = op(plan.transa), transb = op(plan.transb);
    DP_CUDA(cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    DP_CUDA(cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    const cublasLtEpilogue_t epilogue = epilogue_of(plan);
    DP_CUDA(cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (plan.bias_epilogue) {
      const cudaDataType_t bias_type = CUDA_R_16BF;
      DP_CUDA(cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                             sizeof bias_type));
    }
    // pre: D's leading dimension, and D's type (BF16) by cuBLASLt's default for the GELU input, which is left unset:
    // set, a type the kernels do not take makes the matmul call fail rather than the heuristic.
    if (plan.activation != GemmActivation::none) {
      const std::int64_t pre_ld = plan.ldc;
      DP_CUDA(
          cublasLtMatmulDescSetAttribute(operation_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &pre_ld, sizeof pre_ld));
    }
    // Column-major op(A) is m×k, op(B) k×n: A is stored k×m when transposed, B n×k.
    const bool ta = plan.transa == GemmOp::T, tb = plan.transb == GemmOp::T;
    a_ = matrix_layout(CUDA_R_16BF, ta ? plan.k : plan.m, ta ? plan.m : plan.k, plan.lda, plan.batch, plan.stride_a);
    b_ = matrix_layout(CUDA_R_16BF, tb ? plan.n : plan.k, tb ? plan.k : plan.n, plan.ldb, plan.batch, plan.stride_b);
    d_ = matrix_layout(d_type, plan.m, plan.n, plan.ldc, plan.batch, plan.stride_c);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

CublasLtDescriptors::CublasLtDescriptors(CublasLtDescriptors&& other) noexcept
    : operation_(std::exchange(other.operation_, nullptr)),
      a_(std::exchange(other.a_, nullptr)),
      b_(std::exchange(other.b_, nullptr)),
      d_(std::exchange(other.d_, nullptr)) {}

CublasLtDescriptors::~CublasLtDescriptors() { release(); }

void CublasLtDescriptors::release() noexcept {
  for (cublasLtMatrixLayout_t layout : {a_, b_, d_})
    if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
  if (operation_ != nullptr) cublasLtMatmulDescDestroy(operation_);
}

}  // namespace dptrain::cuda
