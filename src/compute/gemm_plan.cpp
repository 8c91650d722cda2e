// GEMM plans (gemm_plan.hpp): each backend product written once as a row-major product of contiguous arrays and
// turned into the column-major call by one rule, row_major_product below.
#include "dptrain/compute/gemm_plan.hpp"

#include <algorithm>
#include <cmath>

#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

using i64 = std::int64_t;

// One factor of a row-major product: which tensor, whether it is used transposed.
struct Factor {
  GemmOperand operand;
  GemmOp op;
};

// Row-major D[rows,cols] = alpha·op(X)·op(Y) + beta·D, op(X) [rows,inner], op(Y) [inner,cols], every array
// contiguous (its ld is its row length as stored).
// Column-major that is Dᵀ = op(Y)ᵀ·op(X)ᵀ: A = Y, B = X, m = cols, n = rows.
GemmPlan row_major_product(GemmOperand d, Factor x, Factor y, std::size_t rows, std::size_t cols,
                           std::size_t inner, float alpha, float beta) {
  DP_ASSERT(rows > 0 && cols > 0 && inner > 0);
  GemmPlan plan{.a = y.operand, .b = x.operand, .c = d};
  plan.transa = y.op;
  plan.transb = x.op;
  plan.m = i64(cols);
  plan.n = i64(rows);
  plan.k = i64(inner);
  plan.lda = i64(y.op == GemmOp::N ? cols : inner);  // Y stored [inner,cols], or [cols,inner] when transposed
  plan.ldb = i64(x.op == GemmOp::N ? inner : rows);  // X stored [rows,inner], or [inner,rows]
  plan.ldc = i64(cols);
  plan.alpha = alpha;
  plan.beta = beta;
  return plan;
}

// The plan with `operand`'s rows ld elements apart instead of contiguous (ld at least its row length): the ld of
// whichever of A, B, C holds it.
GemmPlan with_row_length(GemmPlan plan, GemmOperand operand, std::size_t ld) {
  i64& plan_ld = plan.a == operand ? plan.lda : plan.b == operand ? plan.ldb : plan.ldc;
  DP_ASSERT((plan.a == operand || plan.b == operand || plan.c == operand) && i64(ld) >= plan_ld);
  plan_ld = i64(ld);
  return plan;
}

// The plan repeated over `batch` arrays of each operand laid one after another: every stride is its operand's
// whole matrix as stored (ld × columns), even for a batch of one.
GemmPlan batched(GemmPlan plan, std::size_t batch) {
  DP_ASSERT(batch > 0);
  plan.batch = i64(batch);
  plan.stride_a = plan.lda * (plan.transa == GemmOp::N ? plan.k : plan.m);
  plan.stride_b = plan.ldb * (plan.transb == GemmOp::N ? plan.n : plan.k);
  plan.stride_c = plan.ldc * plan.n;
  return plan;
}

// The attention shape: heads, sequence length, head size, and the score scale as the backends compute it.
struct Heads {
  std::size_t count, T, hs;
  float scale;
};

Heads heads(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  DP_ASSERT(B > 0 && T > 0 && NH > 0 && C % NH == 0 && C >= NH);
  const std::size_t hs = C / NH;
  return {B * NH, T, hs, 1.0f / std::sqrt(float(hs))};
}

constexpr GemmOp kN = GemmOp::N;
constexpr GemmOp kT = GemmOp::T;
using O = GemmOperand;

}  // namespace

std::string_view operand_name(GemmOperand operand) {
  switch (operand) {
    case O::in: return "in";
    case O::weight: return "weight";
    case O::out: return "out";
    case O::dout: return "dout";
    case O::din: return "din";
    case O::dweight: return "dweight";
    case O::q: return "q";
    case O::k: return "k";
    case O::v: return "v";
    case O::y: return "y";
    case O::dy: return "dy";
    case O::dq: return "dq";
    case O::dk: return "dk";
    case O::dv: return "dv";
    case O::scores: return "scores";
    case O::probs: return "probs";
    case O::dprobs: return "dprobs";
    case O::dscores: return "dscores";
    case O::bias: return "bias";
    case O::ones: return "ones";
    case O::pre: return "pre";
    case O::residual: return "residual";
  }
  return "?";
}

std::string_view activation_name(GemmActivation activation) {
  switch (activation) {
    case GemmActivation::none: return "none";
    case GemmActivation::gelu: return "gelu";
    case GemmActivation::dgelu: return "dgelu";
  }
  return "?";
}

GemmPlan matmul_forward_plan(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out, bool bias,
                             GemmActivation activation) {
  DP_ASSERT(activation != GemmActivation::dgelu);
  // out[N,OC] = in[N,C]·weight[OC,C]ᵀ
  GemmPlan plan =
      with_row_length(row_major_product(O::out, {O::in, kN}, {O::weight, kT}, N, OC, C, 1.0f, 0.0f), O::out, ld_out);
  plan.bias_epilogue = bias;
  plan.activation = activation;
  return plan;
}

GemmPlan matmul_backward_input_plan(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out,
                                    GemmActivation activation) {
  DP_ASSERT(activation != GemmActivation::gelu);
  // din[N,C] = dout[N,OC]·weight[OC,C]
  GemmPlan plan = with_row_length(row_major_product(O::din, {O::dout, kN}, {O::weight, kN}, N, C, OC, 1.0f, 0.0f),
                                  O::dout, ld_out);
  plan.activation = activation;
  return plan;
}

GemmPlan matmul_backward_weight_plan(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out) {
  // dweight[OC,C] += dout[N,OC]ᵀ·in[N,C]
  return with_row_length(row_major_product(O::dweight, {O::dout, kT}, {O::in, kN}, OC, C, N, 1.0f, 1.0f), O::dout,
                         ld_out);
}

GemmPlan with_residual(GemmPlan plan) {
  DP_ASSERT(plan.beta == 0.0f && !plan.residual);
  plan.residual = true;
  plan.beta = 1.0f;
  return plan;
}

GemmPlan attention_scores_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const Heads h = heads(B, T, C, NH);  // scores[T,T] = scale·q[T,hs]·k[T,hs]ᵀ
  return batched(row_major_product(O::scores, {O::q, kN}, {O::k, kT}, h.T, h.T, h.hs, h.scale, 0.0f), h.count);
}

GemmPlan attention_output_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const Heads h = heads(B, T, C, NH);  // y[T,hs] = probs[T,T]·v[T,hs]
  return batched(row_major_product(O::y, {O::probs, kN}, {O::v, kN}, h.T, h.hs, h.T, 1.0f, 0.0f), h.count);
}

GemmPlan attention_dprobs_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const Heads h = heads(B, T, C, NH);  // dprobs[T,T] = dy[T,hs]·v[T,hs]ᵀ
  return batched(row_major_product(O::dprobs, {O::dy, kN}, {O::v, kT}, h.T, h.T, h.hs, 1.0f, 0.0f), h.count);
}

GemmPlan attention_dv_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const Heads h = heads(B, T, C, NH);  // dv[T,hs] = probs[T,T]ᵀ·dy[T,hs]
  return batched(row_major_product(O::dv, {O::probs, kT}, {O::dy, kN}, h.T, h.hs, h.T, 1.0f, 0.0f), h.count);
}

GemmPlan attention_dq_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const Heads h = heads(B, T, C, NH);  // dq[T,hs] = scale·dscores[T,T]·k[T,hs]
  return batched(row_major_product(O::dq, {O::dscores, kN}, {O::k, kN}, h.T, h.hs, h.T, h.scale, 0.0f), h.count);
}

GemmPlan attention_dk_plan(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const Heads h = heads(B, T, C, NH);  // dk[T,hs] = scale·dscores[T,T]ᵀ·q[T,hs]
  return batched(row_major_product(O::dk, {O::dscores, kT}, {O::q, kN}, h.T, h.hs, h.T, h.scale, 0.0f), h.count);
}

UnfusedBias unfused_bias_plans(const GemmPlan& plan) {
  DP_ASSERT(plan.bias_epilogue && (plan.beta == 0.0f || plan.residual) && plan.batch == 1 &&
            plan.activation == GemmActivation::none);
  GemmPlan broadcast{.a = O::bias, .b = O::ones, .c = plan.c};
  broadcast.m = plan.m;
  broadcast.n = plan.n;
  broadcast.k = 1;
  broadcast.lda = plan.m;
  // The ones as Bᵀ, stored n × 1 (ldb = n): described as a 1 × n B with ldb = 1 its columns would be 2 bytes
  // apart, and cuBLASLt's heuristic, asked for that alignment, may offer no algorithm.
  broadcast.transb = GemmOp::T;
  broadcast.ldb = plan.n;
  broadcast.ldc = plan.ldc;
  broadcast.beta = plan.beta;  // on the residual, where there is one
  broadcast.residual = plan.residual;
  GemmPlan product = plan;
  product.bias_epilogue = false;
  product.residual = false;
  product.beta = 1.0f;
  return {broadcast, product};
}

namespace {

enum class Dimension { m, n, k };

// The part restricted to [begin, end) of one dimension: that many rows of op(A) and D (m), columns of op(B) and D
// (n) or terms of the sums (k), the operands' pointers advanced to `begin`.
GemmPart restricted(GemmPart part, Dimension dimension, i64 begin, i64 end) {
  const GemmPlan p = part.plan;
  const bool a_n = p.transa == GemmOp::N, b_n = p.transb == GemmOp::N;
  switch (dimension) {
    case Dimension::m:
      part.plan.m = end - begin;
      part.offset_a += a_n ? begin : begin * p.lda;
      part.offset_c += begin;
      part.offset_bias += begin;
      break;
    case Dimension::n:
      part.plan.n = end - begin;
      part.offset_b += b_n ? begin * p.ldb : begin;
      part.offset_c += begin * p.ldc;
      break;
    case Dimension::k:
      part.plan.k = end - begin;
      part.offset_a += a_n ? begin * p.lda : begin;
      part.offset_b += b_n ? begin : begin * p.ldb;
      break;
  }
  return part;
}

// The part split along one dimension where it is ragged: [the multiple of 8, the remainder] for m and n, [the
// remainder, the multiple of 8 onto it] for k; the part alone otherwise.
std::vector<GemmPart> split(const GemmPart& part, Dimension dimension) {
  const GemmPlan& p = part.plan;
  const i64 size = dimension == Dimension::m ? p.m : dimension == Dimension::n ? p.n : p.k;
  const i64 aligned = size / kGemmAlignedMultiple * kGemmAlignedMultiple;
  if (aligned == 0 || aligned == size) return {part};
  DP_ASSERT(dimension != Dimension::k || p.activation == GemmActivation::none);  // gemm_activation_fusable
  GemmPart head = restricted(part, dimension, 0, aligned), tail = restricted(part, dimension, aligned, size);
  if (dimension != Dimension::k) return {head, tail};
  head.plan.beta = 1.0f;  // onto the remainder's result, whose β, residual and bias were the plan's
  head.plan.bias_epilogue = false;
  head.plan.residual = false;
  return {tail, head};
}

}  // namespace

std::vector<GemmPart> gemm_aligned_parts(const GemmPlan& plan) {
  std::vector<GemmPart> parts{{plan}};
  for (const Dimension dimension : {Dimension::m, Dimension::n, Dimension::k}) {
    std::vector<GemmPart> finer;
    for (const GemmPart& part : parts)
      for (const GemmPart& piece : split(part, dimension)) finer.push_back(piece);
    parts = std::move(finer);
  }
  return parts;
}

bool gemm_activation_fusable(const GemmPlan& plan) {
  return (plan.k < kGemmAlignedMultiple || plan.k % kGemmAlignedMultiple == 0) &&
         plan.ldc % kGemmAlignedMultiple == 0;
}

std::vector<GemmPart> causal_row_blocks(const GemmPlan& plan, std::size_t block) {
  DP_ASSERT(block > 0 && plan.n > 0);
  const i64 rows = plan.n, step = i64(block);  // D's rows as stored row-major: queries, or keys for dv and dk
  std::vector<GemmPart> parts;
  for (i64 begin = 0; begin < rows; begin += step) {
    const i64 end = std::min(begin + step, rows);
    const GemmPart part = restricted({plan}, Dimension::n, begin, end);
    switch (plan.c) {
      case O::scores:  // [queries, keys]: keys up to the block's last query
      case O::dprobs:
        parts.push_back(restricted(part, Dimension::m, 0, end));
        break;
      case O::y:  // Σ over keys up to the block's last query (probs, dscores are 0 past each query)
      case O::dq:
        parts.push_back(restricted(part, Dimension::k, 0, end));
        break;
      case O::dv:  // key j: Σ over queries i ≥ j, so from the block's first key on
      case O::dk:
        parts.push_back(restricted(part, Dimension::k, begin, rows));
        break;
      default:
        DP_ASSERT(false && "causal_row_blocks takes the attention plans only");
    }
  }
  return parts;
}

std::string gemm_plan_problem(const GemmPlan& p) {
  if (p.m < 1 || p.n < 1 || p.k < 1) return "m, n and k must be at least 1";
  if (p.batch < 1) return "batch must be at least 1";
  const i64 rows_a = p.transa == GemmOp::N ? p.m : p.k;
  const i64 rows_b = p.transb == GemmOp::N ? p.k : p.n;
  if (p.lda < rows_a) return "lda is below the rows of A as stored";
  if (p.ldb < rows_b) return "ldb is below the rows of B as stored";
  if (p.ldc < p.m) return "ldc is below m";
  if (p.stride_a < 0 || p.stride_b < 0 || p.stride_c < 0) return "a stride is negative";
  if (p.batch > 1 && p.stride_c < p.ldc * p.n) return "batch members of D overlap (stride_c < ldc·n)";
  if (p.activation != GemmActivation::none && p.batch > 1) return "an activation epilogue on a batched plan";
  if (p.activation == GemmActivation::dgelu && p.bias_epilogue) return "dgelu takes no bias";
  return "";
}

bool gemm_plan_aligned(const GemmPlan& p, std::size_t element_bytes, std::size_t alignment_bytes) {
  const auto aligned = [&](i64 elements) { return std::size_t(elements) * element_bytes % alignment_bytes == 0; };
  return aligned(p.lda) && aligned(p.ldb) && aligned(p.ldc) && aligned(p.stride_a) && aligned(p.stride_b) &&
         aligned(p.stride_c);
}

}  // namespace dptrain
