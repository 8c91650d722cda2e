// cuBLASLt calls from GEMM plans, with the heuristic's algorithm cached per shape.
#include "cublaslt_gemm.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "cuda_check.hpp"

namespace dptrain::cuda {

namespace {

// The largest power of two (≤ 256) dividing the address and the byte offsets of every column and batch member:
// what cuBLASLt may assume about an operand (it takes it as the pointer's alignment).
unsigned alignment_of(const void* p, std::int64_t ld, std::int64_t stride, std::size_t element_bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const auto column = std::uintptr_t(ld) * element_bytes, member = std::uintptr_t(stride) * element_bytes;
  unsigned alignment = 256;
  while (alignment > 1 && (address % alignment != 0 || column % alignment != 0 || member % alignment != 0))
    alignment /= 2;
  return alignment;
}

cublasLtMatrixLayout_t matrix_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                     int batch, std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  DP_CUDA(cublasLtMatrixLayoutCreate(&layout, type, std::uint64_t(rows), std::uint64_t(cols), ld));
  if (batch > 1) {
    DP_CUDA(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    DP_CUDA(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof stride));
  }
  return layout;
}

cublasOperation_t op(GemmOp o) { return o == GemmOp::T ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

CublasLtGemm::CublasLtGemm(Memory& device_memory, cudaStream_t stream)
    : stream_(stream), workspace_(device_memory, kWorkspaceBytes) {
  DP_CUDA(cublasLtCreate(&handle_));
}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [key, p] : prepared_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.operation);
  }
  cublasLtDestroy(handle_);
}

const CublasLtGemm::Prepared& CublasLtGemm::prepare(const Key& key) {
  if (auto found = prepared_.find(key); found != prepared_.end()) return found->second;
  const auto& [plan, d_type_int, align_a, align_b, align_d] = key;
  const bool bias = plan.bias_epilogue;
  const auto d_type = cudaDataType_t(d_type_int);
  Prepared p;
  DP_CUDA(cublasLtMatmulDescCreate(&p.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = op(plan.transa), transb = op(plan.transb);
  DP_CUDA(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  DP_CUDA(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    DP_CUDA(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    DP_CUDA(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                           sizeof bias_type));
  }
  // Column-major op(A) is m×k, op(B) k×n: A is stored k×m when transposed, B n×k.
  const bool ta = plan.transa == GemmOp::T, tb = plan.transb == GemmOp::T;
  const int batch = int(plan.batch);
  p.a = matrix_layout(CUDA_R_16BF, ta ? plan.k : plan.m, ta ? plan.m : plan.k, plan.lda, batch, plan.stride_a);
  p.b = matrix_layout(CUDA_R_16BF, tb ? plan.n : plan.k, tb ? plan.k : plan.n, plan.ldb, batch, plan.stride_b);
  p.d = matrix_layout(d_type, plan.m, plan.n, plan.ldc, batch, plan.stride_c);

  cublasLtMatmulPreference_t preference = nullptr;
  DP_CUDA(cublasLtMatmulPreferenceCreate(&preference));
  const std::uint64_t workspace = kWorkspaceBytes;
  DP_CUDA(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace));
  const std::uint32_t alignments[4] = {align_a, align_b, align_d, align_d};
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    DP_CUDA(cublasLtMatmulPreferenceSetAttribute(preference, alignment_attributes[i], &alignments[i],
                                                 sizeof alignments[i]));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, p.operation, p.a, p.b, p.d, p.d, preference,
                                                                1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0)
    throw std::runtime_error(fmt::format(
        "cuBLASLt has no algorithm for m {} n {} k {} (op {}{}, lda {} ldb {} ldc {}, batch {}, D {}, bias {}, "
        "alignments {}/{}/{} bytes)",
        plan.m, plan.n, plan.k, ta ? 'T' : 'N', tb ? 'T' : 'N', plan.lda, plan.ldb, plan.ldc,
        plan.batch, d_type == CUDA_R_32F ? "fp32" : "bf16", bias, align_a, align_b, align_d));
  p.algorithm = result.algo;
  return prepared_.emplace(key, p).first->second;
}

void CublasLtGemm::run(const GemmPlan& plan, std::initializer_list<GemmTensor> tensors, DType d, const void* bias) {
  const void *A = gemm_tensor(tensors, plan.a), *B = gemm_tensor(tensors, plan.b);
  void* D = const_cast<void*>(gemm_tensor(tensors, plan.c));
  if (plan.bias_epilogue != (bias != nullptr)) throw std::logic_error("GEMM: bias given iff the plan adds one");
  const cudaDataType_t d_type = d == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  const Prepared& p = prepare({plan, int(d_type), alignment_of(A, plan.lda, plan.stride_a, 2),
                               alignment_of(B, plan.ldb, plan.stride_b, 2),
                               alignment_of(D, plan.ldc, plan.stride_c, element_size(d))});
  if (bias)
    DP_CUDA(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const float alpha = plan.alpha, beta = plan.beta;
  DP_CUDA(cublasLtMatmul(handle_, p.operation, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.algorithm,
                         workspace_.data(), kWorkspaceBytes, stream_));
}

}  // namespace dptrain::cuda
