// GEMM plans: every matrix product of the CUDA backend as one column-major GEMM call, in the terms cuBLASLt and
// cblas_sgemm(CblasColMajor, …) take it: D(m×n) = alpha·op(A)·op(B) + beta·C, C and D the same array (in place)
// but where the plan reads a residual as C, repeated `batch` times with the pointers advanced by the strides. Pure
// host code, so that a CPU test can replay every plan with cblas_sgemm against a row-major reference
// (tests/compute/gemm_plan_test.cpp): layout mistakes are the commonest GEMM bug, and they show up here without a
// GPU.
//
// Row-major → column-major: a row-major X[r,c] (element (i,j) at i·c + j) is, read column-major, Xᵀ (c×r) with
// ld = c. So the row-major product D[r,c] = op(X)·op(Y) is the column-major Dᵀ = op(Y)ᵀ·op(X)ᵀ over the same
// memory: A is Y's array and B is X's (the operands swap), each keeps its own transpose flag, m = c (columns of D),
// n = r (rows of D), ldc = c, and lda, ldb are the row lengths of the arrays as stored.
//
// Every array here is contiguous, so each ld is its array's row length, but for the matmuls' out and dout, whose
// rows may be padded (ld_out). Element counts, never bytes.
#pragma once
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dptrain {

enum class GemmOp : std::uint8_t { N, T };  // CUBLAS_OP_N / CUBLAS_OP_T, CblasNoTrans / CblasTrans

// Which tensor a plan puts in A, in B and in C = D, by its role in the backend's operation.
enum class GemmOperand : std::uint8_t {
  in, weight, out, dout, din, dweight,  // matmul: in[N,C], weight[OC,C], out[N,OC] and their gradients
  q, k, v, y, dy, dq, dk, dv,           // attention, per head [T,hs]: q, k, v, output y and the gradients
  scores, probs, dprobs, dscores,       // attention, per head [T,T]
  bias, ones,                           // the unfused bias epilogue: the bias [m], and n ones
  pre,                                  // an activation epilogue's pre-activation: D's shape and ld (below)
  residual,                             // a plan's C where it is not D (GemmPlan::residual): D's shape and ld
};
std::string_view operand_name(GemmOperand operand);  // "weight", "dscores", ...

// An activation in the epilogue, on x = alpha·op(A)·op(B) + beta·C (+ bias) in fp32 before D is stored:
//   gelu   D = gelu(x) (tanh approximation), and x stored, rounded to BF16, into `pre` (CUBLASLT_EPILOGUE_GELU_AUX,
//          _GELU_AUX_BIAS with the bias);
//   dgelu  D = x·gelu'(pre), pre read: the gradient through the GELU whose input pre was (CUBLASLT_EPILOGUE_DGELU).
// pre is BF16 with D's shape and leading dimension, found by GemmOperand::pre among the runner's tensors.
enum class GemmActivation : std::uint8_t { none, gelu, dgelu };
std::string_view activation_name(GemmActivation activation);  // "none", "gelu", "dgelu"

struct GemmPlan {
  GemmOperand a, b, c;  // the tensors passed as A, as B, and as C and D (C read only where beta ≠ 0)
  GemmOp transa = GemmOp::N, transb = GemmOp::N;
  std::int64_t m = 0, n = 0, k = 0;  // D is m×n, op(A) m×k, op(B) k×n
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch = 1;  // strided-batched: member i at A + i·stride_a, B + i·stride_b, C/D + i·stride_c
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements; set on every attention plan, 0 on matmul
  float alpha = 1.0f, beta = 0.0f;
  bool bias_epilogue = false;  // CUBLASLT_EPILOGUE_BIAS: D(i,j) += bias[i], a vector of m (= OC) elements
  GemmActivation activation = GemmActivation::none;
  bool residual = false;  // C is the `residual` tensor, of D's layout, not D: D = alpha·op(A)·op(B) + beta·residual

  auto operator<=>(const GemmPlan&) const = default;  // a key: the cuda backend caches cuBLASLt's choice per plan
};

// ---- matmul (backend.hpp): N rows, C input channels, OC output channels; call per window with N = T and the row
// pointers offset by row·C / row·OC where the backend works window by window.

// out and dout have rows of ld_out ≥ OC elements (the LM head's padded logits; OC elsewhere): their ld is ld_out.

// out[N,OC] = in[N,C]·weight[OC,C]ᵀ (+ bias[OC] by the epilogue): A = weight (T), B = in (N), m = OC, n = N,
// k = C, lda = C, ldb = C, ldc = ld_out, beta 0. With GemmActivation::gelu, out = gelu(that) and pre = that.
GemmPlan matmul_forward_plan(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out, bool bias,
                             GemmActivation activation = GemmActivation::none);
// din[N,C] = dout[N,OC]·weight[OC,C]: A = weight (N), B = dout (N), m = C, n = N, k = OC, lda = C, ldb = ld_out,
// ldc = C, beta 0 (the contract writes din). With GemmActivation::dgelu, din = that·gelu'(pre[N,C]).
GemmPlan matmul_backward_input_plan(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out,
                                    GemmActivation activation = GemmActivation::none);
// dweight[OC,C] += dout[N,OC]ᵀ·in[N,C]: A = in (N), B = dout (T), m = C, n = OC, k = N, lda = C, ldb = ld_out,
// ldc = C, beta 1. The bias gradient is not a GEMM here: BGRADB would overwrite dbias, the contract adds to it.
GemmPlan matmul_backward_weight_plan(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out);
// The plan adding a residual of D's layout to its product, rounded once: D = alpha·op(A)·op(B) + residual (+ bias).
// For a plan with beta 0 (the matmul forward's: out = in·weightᵀ + bias + residual).
GemmPlan with_residual(GemmPlan plan);

// ---- attention: strided-batched over the B·NH heads, hs = C/NH; q, k, v, y, dy, dq, dk, dv are [B,NH,T,hs]
// contiguous (a head's [T,hs] every T·hs elements: the backend permutes them out of qkv[B,T,3C] first, whose heads
// are not evenly strided), scores, probs, dprobs, dscores [B,NH,T,T] (a head every T·T). Every output is written
// (beta 0): the backend's scratch, folded into dqkv by the unpermute.

// scores[T,T] = scale·q[T,hs]·k[T,hs]ᵀ, scale = 1/sqrt(hs): A = k (T), B = q (N), m = T, n = T, k = hs.
GemmPlan attention_scores_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
// y[T,hs] = probs[T,T]·v[T,hs]: A = v (N), B = probs (N), m = hs, n = T, k = T.
GemmPlan attention_output_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
// dprobs[T,T] = dy[T,hs]·v[T,hs]ᵀ: A = v (T), B = dy (N), m = T, n = T, k = hs.
GemmPlan attention_dprobs_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
// dv[T,hs] = probs[T,T]ᵀ·dy[T,hs]: A = dy (N), B = probs (T), m = hs, n = T, k = T.
GemmPlan attention_dv_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
// dq[T,hs] = scale·dscores[T,T]·k[T,hs]: A = k (N), B = dscores (N), m = hs, n = T, k = T.
GemmPlan attention_dq_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
// dk[T,hs] = scale·dscores[T,T]ᵀ·q[T,hs]: A = q (N), B = dscores (T), m = hs, n = T, k = T.
GemmPlan attention_dk_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);

// ---- the bias epilogue unfused, where cuBLASLt has no kernel with it (an operand at 2-byte alignment may leave
// none): first D = bias·onesᵀ, A = bias (m×1, lda m), B = ones (1×n, ldb 1), k = 1, beta 0 — every column of D
// the bias, exactly (with a residual: beta 1 on it, D = bias + residual, one rounding); then the plan itself
// without its epilogue, with beta 1 onto D. The same arithmetic as the epilogue: alpha·op(A)·op(B) + bias in fp32,
// rounded once into D (twice with a residual). For a plan with a bias epilogue, no activation, beta 0 or a
// residual, and one batch member (the matmul forward's).
struct UnfusedBias {
  GemmPlan broadcast, product;
};
UnfusedBias unfused_bias_plans(const GemmPlan& plan);

// ---- ragged dimensions: cuBLASLt is several times slower on a GEMM whose m, n or k is not a multiple of 8 (16
// bytes of BF16). Measured on an H200, gpt2-124m's LM head at 65536 rows: V = 50257 took 49 ms forward and 48 ms
// for both backward products, V = 50264 or 50240 took 7 ms and 12 ms (docs/cuda.md). Such a plan runs as parts: each
// ragged dimension (above 8) split into its largest multiple of 8 and the remainder (1 to 7), the operands' pointers
// advanced by the offsets below (elements). Splitting m or n splits D into disjoint blocks, each with the plan's
// own sums. Splitting k runs the remainder first, with the plan's beta and bias, then the multiple of 8 with beta 1
// onto it (a residual is the remainder's C): where D is BF16 that stores the partial sum once more (one rounding of
// the remainder's few terms). An
// activation needs the whole sum, so a plan with one is never split along k (gemm_activation_fusable).
struct GemmPart {
  GemmPlan plan;
  std::int64_t offset_a = 0, offset_b = 0, offset_c = 0, offset_bias = 0;
};
inline constexpr std::int64_t kGemmAlignedMultiple = 8;
// The plan's parts in the order to run them: the plan itself alone where no dimension is ragged. Each part's pre
// (an activation's) and residual are at its offset_c: they have D's layout.
std::vector<GemmPart> gemm_aligned_parts(const GemmPlan& plan);
// Whether an activation epilogue can run on the plan: its parts keep k whole (k a multiple of 8, or below 8), and
// ldc, pre's leading dimension too, is a multiple of 8 (cuBLASLt's rule for the GELU input matrix).
bool gemm_activation_fusable(const GemmPlan& plan);

// ---- causal attention in row blocks: the causal mask leaves query i the keys 0..i, so of each head's T×T
// products only what lies on or below the diagonal matters. The attention plan in blocks of `block` rows of D
// (the last may be shorter; D's rows are the queries, or the keys for dv and dk), each block computing only what
// its rows need: scores and dprobs over the keys up to the block's last query, y and dq summing over those keys,
// dv and dk (key j sums over the queries i ≥ j) over the queries from the block's first on. What is left out lies
// above the diagonal: scores and dprobs there are never read (the softmax kernels read j ≤ i), probs and dscores
// there are zeros (the softmax kernels write them), so each element keeps every term that is not an exact zero.
// With T rows in 8 blocks, 9/16 of each T×T product is computed and the score matrices' traffic falls with it.
std::vector<GemmPart> causal_row_blocks(const GemmPlan& attention_plan, std::size_t block);
// The backend's block: T split into at most 8 row blocks.
inline std::size_t attention_causal_block(std::size_t T) { return (T + 7) / 8; }

// ---- checks the backend can make before the first call

// What makes the plan an invalid GEMM call (empty when valid): a dimension or batch below 1, lda below the rows of
// A as stored (m for N, k for T), ldb below the rows of B as stored (k for N, n for T), ldc below m, a negative
// stride, batch members of D that overlap (stride_c < ldc·n), an activation on a batched plan, or dgelu with a bias.
std::string gemm_plan_problem(const GemmPlan& plan);

// Whether every ld and stride, in bytes (elements × element_bytes), is a multiple of alignment_bytes, so that each
// column and batch member starts as aligned as the base pointers. BF16 (2 bytes) with cuBLASLt's 16: ld and strides
// multiples of 8 elements, which the matmul plans have where C and OC are multiples of 8 and the attention ones
// where hs and T are (scores/probs have ld = T). The base pointers are the caller's to align.
bool gemm_plan_aligned(const GemmPlan& plan, std::size_t element_bytes, std::size_t alignment_bytes = 16);

}  // namespace dptrain
