// cuBLASLt calls from GEMM plans, with the heuristic's algorithm cached per shape.
#include "cublaslt_gemm.hpp"

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "dptrain/core/bf16.hpp"

namespace dptrain::cuda {

namespace {

// What cuBLASLt answers for a descriptor or an epilogue it does not take (an answer about the shape, after which
// the composition runs); any other failure (execution, internal, architecture, allocation) is a fault, reported.
bool refused(cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE;
}

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

// The call in words, for the messages of a failed heuristic or matmul.
std::string describe(const GemmPlan& plan, cudaDataType_t d_type, unsigned align_a, unsigned align_b,
                     unsigned align_d) {
  return fmt::format(
      "m {} n {} k {} (op {}{}, lda {} ldb {} ldc {}, batch {}, D {}, bias {}, activation {}, alignments {}/{}/{} "
      "bytes)",
      plan.m, plan.n, plan.k, plan.transa == GemmOp::T ? 'T' : 'N', plan.transb == GemmOp::T ? 'T' : 'N', plan.lda,
      plan.ldb, plan.ldc, plan.batch, d_type == CUDA_R_32F ? "fp32" : "bf16", plan.bias_epilogue,
      activation_name(plan.activation), align_a, align_b, align_d);
}

// The pointers the heuristic reads alignments from, and a call uses: the bias and the activation's pre.
void set_epilogue_pointers(const CublasLtDescriptors& described, const void* bias, const void* pre) {
  if (bias)
    DP_CUDA(
        cublasLtMatmulDescSetAttribute(described.operation(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (pre)
    DP_CUDA(cublasLtMatmulDescSetAttribute(described.operation(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre,
                                           sizeof pre));
}

}  // namespace

CublasLtGemm::CublasLtGemm(Memory& device_memory, cudaStream_t stream)
    : memory_(device_memory), stream_(stream), workspace_(device_memory, kWorkspaceBytes) {
  DP_CUDA(cublasLtCreate(&handle_));
}

CublasLtGemm::~CublasLtGemm() {
  prepared_.clear();  // the descriptors before the handle
  cublasLtDestroy(handle_);
}

CublasLtGemm::Key CublasLtGemm::key_of(const GemmPlan& plan, const void* A, const void* B, const void* C,
                                       const void* D, DType d, const void* bias, const void* pre) {
  return {plan,
          int(d == DType::f32 ? CUDA_R_32F : CUDA_R_16BF),
          alignment_of(A, plan.lda, plan.stride_a, 2),
          alignment_of(B, plan.ldb, plan.stride_b, 2),
          alignment_of(C, plan.ldc, plan.stride_c, element_size(d)),
          alignment_of(D, plan.ldc, plan.stride_c, element_size(d)),
          bias ? alignment_of(bias, 0, 0, 2) : 0,
          pre ? alignment_of(pre, plan.ldc, 0, 2) : 0};
}

const CublasLtGemm::Prepared* CublasLtGemm::prepare(const Key& key, const void* bias, const void* pre) {
  if (auto found = prepared_.find(key); found != prepared_.end()) return found->second ? &*found->second : nullptr;
  const auto& [plan, d_type_int, align_a, align_b, align_c, align_d, align_bias, align_pre] = key;
  const auto d_type = cudaDataType_t(d_type_int);
  Prepared p{CublasLtDescriptors(plan, d_type)};
  // The heuristic reads the bias's and pre's alignments from their pointers' values: give it them (the bias always
  // kBiasAlignment-aligned, pre's alignment in the key).
  set_epilogue_pointers(p.descriptors, bias, pre);

  cublasLtMatmulPreference_t preference = nullptr;
  DP_CUDA(cublasLtMatmulPreferenceCreate(&preference));
  const std::uint64_t workspace = kWorkspaceBytes;
  DP_CUDA(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace));
  const std::uint32_t alignments[4] = {align_a, align_b, align_c, align_d};
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    DP_CUDA(cublasLtMatmulPreferenceSetAttribute(preference, alignment_attributes[i], &alignments[i],
                                                 sizeof alignments[i]));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const CublasLtDescriptors& described = p.descriptors;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, described.operation(), described.a(), described.b(), described.d(),
                                     described.d(), preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  // No algorithm (NOT_SUPPORTED, or success with none found) is an answer, kept for the shape; any other status is
  // a call cuBLASLt refused (a descriptor or attribute it rejects), reported rather than taken for "none" — but for
  // an activation epilogue, whose refusal leaves the composition (the backend says which shapes were composed).
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0) ||
      (refused(status) && plan.activation != GemmActivation::none)) {
    prepared_.emplace(key, std::nullopt);
    return nullptr;
  }
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuBLASLt heuristic failed ({}) for {}", cublasLtGetStatusString(status),
                                         describe(plan, d_type, align_a, align_b, align_d)));
  p.algorithm = result.algo;
  return &*prepared_.emplace(key, std::move(p)).first->second;
}

const void* CublasLtGemm::ones(std::size_t count) {
  if (ones_.bytes() < count * sizeof(bf16)) {
    ones_ = Buffer(memory_, count * sizeof(bf16));
    const std::vector<bf16> host(count, to_bf16(1.0f));
    memory_.upload(ones_.data(), host.data(), ones_.bytes());
  }
  return ones_.data();
}

bool CublasLtGemm::has_activation_kernel(const GemmPlan& plan, const void* A, const void* B, const void* C,
                                         const void* D, const void* bias, const void* pre) {
  return prepare(key_of(plan, A, B, C, D, DType::bf16, bias, pre), bias, pre) != nullptr;
}

bool CublasLtGemm::run_part(const GemmPlan& plan, const void* A, const void* B, const void* C, void* D, DType d,
                            const void* bias, const void* pre) {
  const Key key = key_of(plan, A, B, C, D, d, bias, pre);
  const auto d_type = cudaDataType_t(std::get<1>(key));
  const unsigned align_a = std::get<2>(key), align_b = std::get<3>(key), align_d = std::get<5>(key);
  const Prepared* prepared = prepare(key, bias, pre);
  if (prepared == nullptr && plan.bias_epilogue && plan.activation == GemmActivation::none) {
    const UnfusedBias unfused = unfused_bias_plans(plan);  // the residual, if any, is the broadcast's C
    return run_part(unfused.broadcast, bias, ones(std::size_t(plan.n)), C, D, d, nullptr, nullptr) &&
           run_part(unfused.product, A, B, D, D, d, nullptr, nullptr);
  }
  if (prepared == nullptr)
    throw std::runtime_error(
        fmt::format("cuBLASLt has no algorithm for {}", describe(plan, d_type, align_a, align_b, align_d)));
  const Prepared& p = *prepared;
  const CublasLtDescriptors& described = p.descriptors;
  set_epilogue_pointers(described, bias, pre);
  const float alpha = plan.alpha, beta = plan.beta;
  const cublasStatus_t status =
      cublasLtMatmul(handle_, described.operation(), &alpha, A, described.a(), B, described.b(), &beta, C,
                     described.d(), D, described.d(), &p.algorithm, workspace_.data(), kWorkspaceBytes, stream_);
  if (refused(status) && plan.activation != GemmActivation::none) {
    prepared_[key] = std::nullopt;  // the epilogue refused: the composition from now on
    return false;
  }
  const cudaError_t ran = status == CUBLAS_STATUS_SUCCESS && synchronize_each_call() ? cudaStreamSynchronize(stream_)
                                                                                     : cudaSuccess;
  if (status != CUBLAS_STATUS_SUCCESS || ran != cudaSuccess) {
    if (status == CUBLAS_STATUS_ALLOC_FAILED || ran == cudaErrorMemoryAllocation) throw std::bad_alloc();
    throw std::runtime_error(fmt::format(
        "cuBLASLt matmul failed ({}) for {}",
        status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(status) : cudaGetErrorString(ran),
        describe(plan, d_type, align_a, align_b, align_d)));
  }
  return true;
}

}  // namespace dptrain::cuda
