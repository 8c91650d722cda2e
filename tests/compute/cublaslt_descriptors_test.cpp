// The cuBLASLt descriptors of every GEMM plan of the model, made by cuBLASLt itself without a GPU (descriptors are
// host objects; only the handle, the heuristic and the matmul need a device). For each plan (gemm_plan.hpp) of
// the matmul and attention products, at the shapes of the configs, gpt2-124m and awkward ones, and for D in BF16
// and fp32: cuBLASLt accepts every attribute, each read back has the size cuBLASLt's documentation gives its type,
// and holds what the BLAS replay of the same plan (gemm_plan_test) proved right — A and B stored as their
// transposes say, every ld, the batch count and strides, D's type, fp32 compute and scale, the bias epilogue on a
// BF16 vector, the GELU epilogues with their BF16 input of D's ld. A layout mistake between plan and cuBLASLt shows
// here, in CI; the products themselves need a GPU.
#include "cublaslt_descriptors.hpp"

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dptrain/compute/gemm_plan.hpp"
#include "dptrain/model/config.hpp"

namespace dptrain::cuda {
namespace {

// An attribute read back through cuBLASLt's getter, with the size written checked against the type the
// documentation gives it.
template <typename T, typename Object, typename Attribute>
T read_back(cublasStatus_t (*get)(Object, Attribute, void*, std::size_t, std::size_t*), Object object,
            Attribute attribute) {
  T value{};
  std::size_t written = 0;
  EXPECT_EQ(get(object, attribute, &value, sizeof value, &written), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof value) << "attribute " << int(attribute);
  return value;
}
template <typename T>
T layout_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute) {
  return read_back<T>(cublasLtMatrixLayoutGetAttribute, layout, attribute);
}
template <typename T>
T operation_attribute(cublasLtMatmulDesc_t operation, cublasLtMatmulDescAttributes_t attribute) {
  return read_back<T>(cublasLtMatmulDescGetAttribute, operation, attribute);
}

struct Stored {
  std::int64_t rows, cols, ld, stride;
};

void expect_layout(cublasLtMatrixLayout_t layout, cudaDataType_t type, const Stored& s, std::int64_t batch,
                   const char* which) {
  SCOPED_TRACE(which);
  EXPECT_EQ(layout_attribute<std::uint32_t>(layout, CUBLASLT_MATRIX_LAYOUT_TYPE), std::uint32_t(type));
  EXPECT_EQ(layout_attribute<std::int32_t>(layout, CUBLASLT_MATRIX_LAYOUT_ORDER), CUBLASLT_ORDER_COL);
  EXPECT_EQ(layout_attribute<std::uint64_t>(layout, CUBLASLT_MATRIX_LAYOUT_ROWS), std::uint64_t(s.rows));
  EXPECT_EQ(layout_attribute<std::uint64_t>(layout, CUBLASLT_MATRIX_LAYOUT_COLS), std::uint64_t(s.cols));
  EXPECT_EQ(layout_attribute<std::int64_t>(layout, CUBLASLT_MATRIX_LAYOUT_LD), s.ld);
  EXPECT_EQ(layout_attribute<std::int32_t>(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), batch);
  if (batch > 1) {
    EXPECT_EQ(layout_attribute<std::int64_t>(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), s.stride);
  }
}

void expect_describes(const GemmPlan& p, cudaDataType_t d_type) {
  SCOPED_TRACE(std::string("output ") + std::string(operand_name(p.c)) +
               (d_type == CUDA_R_32F ? ", fp32" : ", bf16"));
  const CublasLtDescriptors described(p, d_type);
  const bool ta = p.transa == GemmOp::T, tb = p.transb == GemmOp::T;
  // op(A) is m×k and op(B) k×n, column-major: a transposed operand is stored the other way round.
  expect_layout(described.a(), CUDA_R_16BF, {ta ? p.k : p.m, ta ? p.m : p.k, p.lda, p.stride_a}, p.batch, "A");
  expect_layout(described.b(), CUDA_R_16BF, {tb ? p.n : p.k, tb ? p.k : p.n, p.ldb, p.stride_b}, p.batch, "B");
  expect_layout(described.d(), d_type, {p.m, p.n, p.ldc, p.stride_c}, p.batch, "D");

  const cublasLtMatmulDesc_t op = described.operation();
  EXPECT_EQ(operation_attribute<std::int32_t>(op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE), CUBLAS_COMPUTE_32F);
  EXPECT_EQ(operation_attribute<std::int32_t>(op, CUBLASLT_MATMUL_DESC_SCALE_TYPE), CUDA_R_32F);
  EXPECT_EQ(operation_attribute<std::int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSA), ta ? CUBLAS_OP_T : CUBLAS_OP_N);
  EXPECT_EQ(operation_attribute<std::int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSB), tb ? CUBLAS_OP_T : CUBLAS_OP_N);
  const std::uint32_t epilogue[3][2] = {
      {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS},            // none: without, with the bias
      {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS},  // gelu
      {CUBLASLT_EPILOGUE_DGELU, 0}};                                  // dgelu (no bias)
  EXPECT_EQ(operation_attribute<std::uint32_t>(op, CUBLASLT_MATMUL_DESC_EPILOGUE),
            epilogue[int(p.activation)][p.bias_epilogue ? 1 : 0]);
  if (p.bias_epilogue) {
    EXPECT_EQ(operation_attribute<std::int32_t>(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), CUDA_R_16BF);
  }
  if (p.activation != GemmActivation::none) {  // pre in D's layout, of D's type (the default, -1: unset)
    EXPECT_EQ(operation_attribute<std::int64_t>(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), p.ldc);
    EXPECT_EQ(operation_attribute<std::int32_t>(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE), -1);
  }
}

struct Shape {
  const char* name;
  std::size_t B, T, C, NH, V;
};

// tiny and small (configs/), gpt2-124m at Q = 1024 and micro-batch 64, and awkward ones: one token and channel, C
// not a multiple of 8, an odd head size.
const Shape kShapes[] = {
    {"tiny", 4, 32, 64, 4, 256},  {"small", 16, 128, 256, 4, 256}, {"gpt2-124m", 64, 1024, 768, 12, 50257},
    {"one token", 1, 1, 1, 1, 1}, {"odd", 3, 5, 6, 2, 7},          {"head size 3", 2, 7, 9, 3, 11}};

std::vector<GemmPlan> model_plans(const Shape& s) {
  std::vector<GemmPlan> plans;
  const std::size_t N = s.B * s.T;
  // The model's matmuls: qkv, attention projection, MLP up and down, the classifier (tied embedding, no bias; its
  // logits in rows of the padded length).
  const ModelConfig config{.vocab = int(s.V)};
  const std::size_t Vp = std::size_t(config.logits_row_length());
  const std::array<std::size_t, 3> matmuls[] = {
      {s.C, 3 * s.C, 3 * s.C}, {s.C, s.C, s.C}, {s.C, 4 * s.C, 4 * s.C}, {4 * s.C, s.C, s.C}, {s.C, s.V, Vp}};
  for (const auto& [C, OC, ld_out] : matmuls)
    for (std::size_t rows : {N, s.T}) {  // the whole micro-batch, or one window
      plans.push_back(matmul_forward_plan(rows, C, OC, ld_out, OC != s.V));
      plans.push_back(matmul_backward_input_plan(rows, C, OC, ld_out));
      plans.push_back(matmul_backward_weight_plan(rows, C, OC, ld_out));
    }
  // The MLP's GELU in the epilogues: the up projection's forward, the down projection's input gradient.
  plans.push_back(matmul_forward_plan(N, s.C, 4 * s.C, 4 * s.C, true, GemmActivation::gelu));
  plans.push_back(matmul_forward_plan(N, s.C, 4 * s.C, 4 * s.C, false, GemmActivation::gelu));
  plans.push_back(matmul_backward_input_plan(N, 4 * s.C, s.C, s.C, GemmActivation::dgelu));
  // The projections onto the residual stream, which is their C (of D's layout: the same descriptor).
  plans.push_back(with_residual(matmul_forward_plan(N, s.C, s.C, s.C, true)));
  plans.push_back(with_residual(matmul_forward_plan(N, 4 * s.C, s.C, s.C, true)));
  for (auto attention : {attention_scores_plan, attention_output_plan, attention_dprobs_plan, attention_dv_plan,
                         attention_dq_plan, attention_dk_plan})
    plans.push_back(attention(s.B, s.T, s.C, s.NH));
  return plans;
}

TEST(CublasLtDescriptors, EveryPlanOfTheModelIsAcceptedAndReadsBackAsPlanned) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    for (const GemmPlan& p : model_plans(s))
      for (cudaDataType_t d_type : {CUDA_R_16BF, CUDA_R_32F})
        if (p.activation == GemmActivation::none || d_type == CUDA_R_16BF) expect_describes(p, d_type);
  }
}

TEST(CublasLtDescriptors, AnInvalidPlanIsRefusedWithWhatIsWrong) {
  GemmPlan p = matmul_forward_plan(4, 16, 8, 8, false);
  p.lda = 15;
  try {
    CublasLtDescriptors described(p, CUDA_R_16BF);
    FAIL() << "a plan with lda below the rows of A was described";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "cuBLASLt: lda is below the rows of A as stored");
  }
  p = attention_scores_plan(1, 4, 8, 2);
  p.batch = std::int64_t(INT32_MAX) + 1;
  p.stride_a = p.stride_b = 0;
  EXPECT_THROW({ CublasLtDescriptors described(p, CUDA_R_32F); }, std::invalid_argument);
}

}  // namespace
}  // namespace dptrain::cuda
