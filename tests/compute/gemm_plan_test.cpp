// The CUDA backend's GEMM plans (gemm_plan.hpp) without a GPU: every plan is replayed with
// cblas_sgemm(CblasColMajor, …), which takes a column-major call exactly as cuBLASLt does, on random fp32 arrays
// found by the plan's operand roles, and compared with the row-major product written out as plain loops in double.
// The shapes are awkward on purpose (one row, one channel, channels not a multiple of 8, one position, one head,
// head size 1, several heads), where a swapped m/n or a wrong ld would still pass on square shapes.
//
// Tolerance, from the arithmetic: a sum of k products formed and added in fp32 (unit roundoff u = 2⁻²⁴) differs
// from the exact sum by at most about k·u·Σ|terms| (Higham's γ_k bound, blocking and FMA only make it smaller);
// alpha, beta·C and the bias add at most three roundings more. So each element gets (k + 3)·u·Σ|terms|, the terms
// being alpha·x·y, beta·c and the bias; the double reference is exact to 2⁻⁵³ and the inputs are fp32 values.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "dptrain/compute/gemm_plan.hpp"

namespace dptrain {
namespace {

using O = GemmOperand;
using Tensors = std::map<GemmOperand, std::vector<float>>;

constexpr double kUnitRoundoff = 0x1p-24;
constexpr float kUnwritten = 12345.0f;  // in outputs that a beta-0 plan must overwrite without reading

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& x : values) x = uniform(rng);
  return values;
}

// The last element a batched operand of `rows`×`cols` (column-major, as stored) reaches, plus one: must not pass
// the end of its array.
std::int64_t extent(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t batch, std::int64_t stride) {
  return (batch - 1) * stride + (cols - 1) * ld + rows;
}

// Runs the plan as cuBLASLt would, one batch member at a time: a residual (C where it is not D) copied into D's
// m×n elements first, the bias epilogue as a loop afterwards (D(i,j) += bias[i]).
void replay(const GemmPlan& p, Tensors& tensors, const std::vector<float>* bias = nullptr) {
  ASSERT_TRUE(gemm_plan_problem(p).empty()) << gemm_plan_problem(p);
  ASSERT_EQ(p.bias_epilogue, bias != nullptr);
  const auto narrow = [](std::int64_t x) {
    EXPECT_LE(x, std::numeric_limits<int>::max());
    return int(x);
  };
  const bool a_n = p.transa == GemmOp::N, b_n = p.transb == GemmOp::N;
  const std::vector<float>& a = tensors.at(p.a);
  const std::vector<float>& b = tensors.at(p.b);
  std::vector<float>& c = tensors.at(p.c);
  ASSERT_LE(extent(a_n ? p.m : p.k, a_n ? p.k : p.m, p.lda, p.batch, p.stride_a), std::int64_t(a.size()));
  ASSERT_LE(extent(b_n ? p.k : p.n, b_n ? p.n : p.k, p.ldb, p.batch, p.stride_b), std::int64_t(b.size()));
  ASSERT_LE(extent(p.m, p.n, p.ldc, p.batch, p.stride_c), std::int64_t(c.size()));
  for (std::int64_t i = 0; i < p.batch; ++i) {
    float* d = c.data() + i * p.stride_c;
    if (p.residual) {
      const std::vector<float>& residual = tensors.at(O::residual);
      ASSERT_LE(extent(p.m, p.n, p.ldc, p.batch, p.stride_c), std::int64_t(residual.size()));
      for (std::int64_t col = 0; col < p.n; ++col)
        std::copy_n(residual.data() + i * p.stride_c + col * p.ldc, p.m, d + col * p.ldc);
    }
    cblas_sgemm(CblasColMajor, a_n ? CblasNoTrans : CblasTrans, b_n ? CblasNoTrans : CblasTrans, narrow(p.m),
                narrow(p.n), narrow(p.k), p.alpha, a.data() + i * p.stride_a, narrow(p.lda),
                b.data() + i * p.stride_b, narrow(p.ldb), p.beta, d, narrow(p.ldc));
    if (bias)
      for (std::int64_t col = 0; col < p.n; ++col)
        for (std::int64_t row = 0; row < p.m; ++row) d[col * p.ldc + row] += (*bias)[std::size_t(row)];
  }
}

// Parts of a plan run as the GemmRunner runs them: each part as its aligned parts (gemm_aligned_parts), on the
// operands advanced by the sum of both offsets (a part's arrays are the rest of the plan's from its offset on).
void replay_parts(const std::vector<GemmPart>& parts, Tensors& tensors, const std::vector<float>* bias = nullptr) {
  const GemmPlan& p = parts.front().plan;
  const auto from = [](const std::vector<float>& v, std::int64_t offset) {
    return std::vector<float>(v.begin() + offset, v.end());
  };
  for (const GemmPart& part : parts)
    for (const GemmPart& piece : gemm_aligned_parts(part.plan)) {
      const std::int64_t a = part.offset_a + piece.offset_a, b = part.offset_b + piece.offset_b,
                         c = part.offset_c + piece.offset_c;
      Tensors shifted{
          {p.a, from(tensors.at(p.a), a)}, {p.b, from(tensors.at(p.b), b)}, {p.c, from(tensors.at(p.c), c)}};
      if (p.residual) shifted[O::residual] = from(tensors.at(O::residual), c);  // of D's layout
      const std::vector<float> piece_bias =
          bias ? from(*bias, part.offset_bias + piece.offset_bias) : std::vector<float>{};
      replay(piece.plan, shifted, piece.plan.bias_epilogue ? &piece_bias : nullptr);
      std::copy(shifted.at(p.c).begin(), shifted.at(p.c).end(), tensors.at(p.c).begin() + c);
    }
}

// How a test runs the plan: whole (replay), as its aligned parts, or as its causal row blocks of `block` rows.
struct Run {
  enum { whole, aligned_parts, causal_blocks } how = whole;
  std::size_t block = 0;
};

// A row-major product as the reference computes it: output = alpha·op(X)·op(Y) + beta·output, each factor read
// from its row-major array, transposed or not, batch member after batch member.
struct Product {
  O output, x;
  bool x_transposed;
  O y;
  bool y_transposed;
};

// The row-major [rows, cols] of one batch member of an operand, its rows ld ≥ cols elements apart.
struct Dims {
  std::size_t rows, cols, ld;
};
using DimsOf = std::function<Dims(O)>;

// Replays the plan and expects t[output][b][r][c] = alpha·Σ_l op(X)[b][r][l]·op(Y)[b][l][c] + beta·before[b][r][c]
// + bias[c], written as plain loops over the row-major arrays, within the bound in the file comment, and the
// output's columns past cols (its rows' padding) as they were. alpha and beta are the product's, checked against
// the plan's.
void expect_replay_matches(const GemmPlan& p, Tensors& t, const Product& product, const DimsOf& dims,
                           std::size_t batch, float alpha, float beta, const std::vector<float>* bias = nullptr,
                           Run run = {}) {
  EXPECT_EQ(p.c, product.output);
  EXPECT_EQ(p.batch, std::int64_t(batch));
  EXPECT_EQ(p.alpha, alpha);
  EXPECT_EQ(p.beta, beta);
  const std::vector<float> before = t.at(product.output);
  const std::vector<float>& c_term = p.residual ? t.at(O::residual) : before;  // what beta multiplies
  switch (run.how) {
    case Run::whole:
      replay(p, t, bias);
      break;
    case Run::aligned_parts:
      replay_parts({GemmPart{p}}, t, bias);
      break;
    case Run::causal_blocks:
      replay_parts(causal_row_blocks(p, run.block), t, bias);
      break;
  }
  // Causal blocks leave a T×T output's elements above the diagonal (column past row) as they were: not checked.
  const bool lower_only =
      run.how == Run::causal_blocks && (product.output == O::scores || product.output == O::dprobs);

  const Dims x = dims(product.x), y = dims(product.y), d = dims(product.output);
  const std::size_t rows = product.x_transposed ? x.cols : x.rows, inner = product.x_transposed ? x.rows : x.cols;
  const std::size_t cols = product.y_transposed ? y.rows : y.cols;
  ASSERT_EQ(inner, product.y_transposed ? y.cols : y.rows);
  ASSERT_EQ(rows, d.rows);
  ASSERT_EQ(cols, d.cols);
  // Element (i, j) of op(F) in batch member b.
  const auto element = [&t](O f, Dims dim, bool transposed, std::size_t b, std::size_t i, std::size_t j) {
    return double(transposed ? t.at(f)[(b * dim.rows + j) * dim.ld + i] : t.at(f)[(b * dim.rows + i) * dim.ld + j]);
  };
  const std::vector<float>& got = t.at(product.output);
  ASSERT_EQ(got.size(), batch * rows * d.ld);
  int wrong = 0;
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = cols; c < d.ld; ++c) {
        const std::size_t at = (b * rows + r) * d.ld + c;
        if (std::bit_cast<std::uint32_t>(got[at]) != std::bit_cast<std::uint32_t>(before[at]) && ++wrong <= 5)
          ADD_FAILURE() << "padding [" << b << "," << r << "," << c << "] changed to " << got[at];
      }
      for (std::size_t c = 0; c < cols; ++c) {
        if (lower_only && c > r) continue;
        const std::size_t at = (b * rows + r) * d.ld + c;
        double sum = 0.0, magnitude = 0.0;
        for (std::size_t l = 0; l < inner; ++l) {
          const double term = double(alpha) * element(product.x, x, product.x_transposed, b, r, l) *
                              element(product.y, y, product.y_transposed, b, l, c);
          sum += term;
          magnitude += std::abs(term);
        }
        if (beta != 0.0f) {
          sum += double(beta) * c_term[at];
          magnitude += std::abs(double(beta) * c_term[at]);
        }
        if (bias) {
          sum += (*bias)[c];
          magnitude += std::abs((*bias)[c]);
        }
        const double bound = double(inner + 3) * kUnitRoundoff * magnitude + 1e-30;
        if (!(std::abs(got[at] - sum) <= bound) && ++wrong <= 5)
          ADD_FAILURE() << "element [" << b << "," << r << "," << c << "]: got " << got[at] << ", reference " << sum
                        << ", bound " << bound;
      }
    }
  EXPECT_EQ(wrong, 0);
}

// ---- the shapes ----------------------------------------------------------------------------------------------
// Each shape knows its operands' row-major [rows, cols] per batch member and fills them: inputs random, outputs
// that the plan must overwrite (din, out, attention's) with kUnwritten, outputs it accumulates into (dweight) with
// random values.

struct MatmulShape {
  std::size_t N, C, OC, ld_out;
  std::size_t batch() const { return 1; }
  float scale() const { return 1.0f; }  // no matmul product is scaled
  // in, din [N,C]; weight, dweight [OC,C]; out, dout [N,OC] in rows of ld_out
  Dims dims(O o) const {
    if (o == O::out || o == O::dout) return {N, OC, ld_out};
    return {o == O::weight || o == O::dweight ? OC : N, C, C};
  }
  // dout's padding is NaN, which any product that read it would carry into its result.
  Tensors random_tensors(std::mt19937& rng) const {
    std::vector<float> dout(N * ld_out, std::numeric_limits<float>::quiet_NaN());
    for (std::size_t r = 0; r < N; ++r)
      for (std::size_t c = 0; c < OC; ++c) dout[r * ld_out + c] = random_floats(1, rng)[0];
    return {{O::in, random_floats(N * C, rng)}, {O::weight, random_floats(OC * C, rng)},
            {O::dout, std::move(dout)},         {O::out, std::vector<float>(N * ld_out, kUnwritten)},
            {O::din, std::vector<float>(N * C, kUnwritten)}, {O::dweight, random_floats(OC * C, rng)},
            {O::residual, random_floats(N * ld_out, rng)}};
  }
  std::string describe() const {
    return "N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
           " ld_out=" + std::to_string(ld_out);
  }
};
// One row; one channel in and out; C not a multiple of 8; OC = 1; a larger one with everything a multiple of 8;
// out's rows padded (as the LM head's logits are): by one, to a multiple of 8, and OC = 1 in rows of 64.
const MatmulShape kMatmulShapes[] = {{1, 1, 1, 1},    {1, 13, 5, 5},    {7, 13, 1, 1},  {3, 1, 9, 9},
                                     {33, 20, 17, 17}, {16, 24, 40, 40}, {3, 13, 5, 6}, {33, 20, 17, 24},
                                     {2, 3, 1, 64}};

struct AttentionShape {
  std::size_t B, T, C, NH;
  std::size_t batch() const { return B * NH; }  // the heads
  std::size_t hs() const { return C / NH; }
  float scale() const { return 1.0f / std::sqrt(float(hs())); }
  // Per head: scores, probs, dprobs, dscores [T,T]; q, k, v, y, dy, dq, dk, dv [T,hs].
  Dims dims(O o) const {
    const std::size_t cols = o == O::scores || o == O::probs || o == O::dprobs || o == O::dscores ? T : hs();
    return {T, cols, cols};
  }
  // Every attention plan has beta 0, so every output starts kUnwritten; probabilities need not sum to one here.
  Tensors random_tensors(std::mt19937& rng) const {
    Tensors t;
    for (O input : {O::q, O::k, O::v, O::dy, O::probs, O::dscores})
      t[input] = random_floats(batch() * dims(input).rows * dims(input).cols, rng);
    for (O output : {O::y, O::dq, O::dk, O::dv, O::scores, O::dprobs})
      t[output] = std::vector<float>(batch() * dims(output).rows * dims(output).cols, kUnwritten);
    return t;
  }
  std::string describe() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
           " NH=" + std::to_string(NH);
  }
};
// hs = 1 with one position; one position; several windows and heads (B·NH = 6, hs 4); hs = 1 over six heads;
// one head; and an aligned shape.
const AttentionShape kAttentionShapes[] = {{1, 1, 1, 1}, {1, 1, 8, 2},  {2, 5, 12, 3},
                                           {1, 7, 6, 6}, {3, 9, 10, 1}, {2, 16, 32, 4}};

// ---- every product, replayed --------------------------------------------------------------------------------

using MatmulPlanFn = GemmPlan (*)(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out);
using AttentionPlanFn = GemmPlan (*)(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);

// One backend product: its plan function (matmul or attention), the row-major product it must compute, and the
// alpha (scale = 1/sqrt(hs) or 1), beta and bias that product has.
struct ReplayCase {
  const char* name;
  MatmulPlanFn matmul;
  AttentionPlanFn attention;
  Product product;
  bool scaled;
  float beta;
  bool bias;
};

void PrintTo(const ReplayCase& c, std::ostream* os) { *os << c.name; }

GemmPlan matmul_forward_with_bias(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out) {
  return matmul_forward_plan(N, C, OC, ld_out, true);
}
GemmPlan matmul_forward_without_bias(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out) {
  return matmul_forward_plan(N, C, OC, ld_out, false);
}
GemmPlan matmul_forward_onto_residual(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out) {
  return with_residual(matmul_forward_plan(N, C, OC, ld_out, true));
}
GemmPlan matmul_backward_input(std::size_t N, std::size_t C, std::size_t OC, std::size_t ld_out) {
  return matmul_backward_input_plan(N, C, OC, ld_out);
}

// The weight gradient accumulates (beta 1) onto the random values already in dweight; din is written (beta 0), as
// is every attention output (the backend's scratch).
const ReplayCase kReplayCases[] = {
    {"OutEqualsInTimesWeightTransposed", matmul_forward_without_bias, nullptr,
     {O::out, O::in, false, O::weight, true}, false, 0.0f, false},
    {"OutEqualsInTimesWeightTransposedPlusBias", matmul_forward_with_bias, nullptr,
     {O::out, O::in, false, O::weight, true}, false, 0.0f, true},
    {"OutEqualsResidualPlusInTimesWeightTransposedPlusBias", matmul_forward_onto_residual, nullptr,
     {O::out, O::in, false, O::weight, true}, false, 1.0f, true},
    {"DinEqualsDoutTimesWeight", matmul_backward_input, nullptr, {O::din, O::dout, false, O::weight, false},
     false, 0.0f, false},
    {"DweightPlusEqualsDoutTransposedTimesIn", matmul_backward_weight_plan, nullptr,
     {O::dweight, O::dout, true, O::in, false}, false, 1.0f, false},
    {"ScoresEqualScaleTimesQTimesKTransposed", nullptr, attention_scores_plan, {O::scores, O::q, false, O::k, true},
     true, 0.0f, false},
    {"YEqualsProbsTimesV", nullptr, attention_output_plan, {O::y, O::probs, false, O::v, false}, false, 0.0f, false},
    {"DprobsEqualDyTimesVTransposed", nullptr, attention_dprobs_plan, {O::dprobs, O::dy, false, O::v, true}, false,
     0.0f, false},
    {"DvEqualsProbsTransposedTimesDy", nullptr, attention_dv_plan, {O::dv, O::probs, true, O::dy, false}, false,
     0.0f, false},
    {"DqEqualsScaleTimesDscoresTimesK", nullptr, attention_dq_plan, {O::dq, O::dscores, false, O::k, false}, true,
     0.0f, false},
    {"DkEqualsScaleTimesDscoresTransposedTimesQ", nullptr, attention_dk_plan, {O::dk, O::dscores, true, O::q, false},
     true, 0.0f, false},
};

GemmPlan plan_of(const ReplayCase& c, const MatmulShape& s) { return c.matmul(s.N, s.C, s.OC, s.ld_out); }
GemmPlan plan_of(const ReplayCase& c, const AttentionShape& s) { return c.attention(s.B, s.T, s.C, s.NH); }

template <typename Shape, std::size_t count>
void expect_replays_on(const Shape (&shapes)[count], const ReplayCase& c, Run run) {
  std::mt19937 rng(1);
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.describe());
    Tensors t = s.random_tensors(rng);
    const std::vector<float> bias = random_floats(s.dims(c.product.output).cols, rng);
    expect_replay_matches(
        plan_of(c, s), t, c.product, [&s](O o) { return s.dims(o); }, s.batch(), c.scaled ? s.scale() : 1.0f, c.beta,
        c.bias ? &bias : nullptr, run);
  }
}

class GemmPlanReplay : public testing::TestWithParam<ReplayCase> {};

TEST_P(GemmPlanReplay, MatchesTheRowMajorProductOnAwkwardShapes) {
  if (GetParam().matmul)
    expect_replays_on(kMatmulShapes, GetParam(), {});
  else
    expect_replays_on(kAttentionShapes, GetParam(), {});
}

// Run as its aligned parts, as the GemmRunner runs it: the same product within the same bound (a split k adds one
// rounding of a partial sum, inside the k + 3 of the bound), the padding untouched. The shapes with m, n or k above
// 8 and not a multiple of it (20, 17, 33, 13; T = 9, hs = 10) are split.
TEST_P(GemmPlanReplay, RunAsItsAlignedPartsMatchesTheRowMajorProduct) {
  if (GetParam().matmul)
    expect_replays_on(kMatmulShapes, GetParam(), {Run::aligned_parts});
  else
    expect_replays_on(kAttentionShapes, GetParam(), {Run::aligned_parts});
}

INSTANTIATE_TEST_SUITE_P(EveryProduct, GemmPlanReplay, testing::ValuesIn(kReplayCases),
                         [](const testing::TestParamInfo<ReplayCase>& info) { return info.param.name; });

// The bias epilogue unfused (where cuBLASLt has no kernel with it): the broadcast writes the bias into every
// column of out exactly and leaves the padding alone, and the product then accumulates onto it — the forward
// matmul with its bias, within the same bound.
TEST(GemmPlan, TheUnfusedBiasIsABroadcastThenTheProductOntoIt) {
  std::mt19937 rng(3);
  for (const MatmulShape& s : kMatmulShapes) {
    SCOPED_TRACE(s.describe());
    Tensors t = s.random_tensors(rng);
    const std::vector<float> bias = random_floats(s.OC, rng);
    t[O::bias] = bias;
    t[O::ones] = std::vector<float>(s.N, 1.0f);
    const UnfusedBias unfused = unfused_bias_plans(matmul_forward_plan(s.N, s.C, s.OC, s.ld_out, true));
    EXPECT_EQ(gemm_plan_problem(unfused.broadcast), "");
    EXPECT_FALSE(unfused.product.bias_epilogue);
    // The ones are one contiguous column read transposed (ldb = N), not N columns of one element 2 bytes apart,
    // which would leave cuBLASLt's heuristic only kernels for 2-byte-aligned operands.
    EXPECT_EQ(unfused.broadcast.transb, GemmOp::T);
    EXPECT_EQ(std::size_t(unfused.broadcast.ldb), s.N);
    replay(unfused.broadcast, t);
    for (std::size_t r = 0; r < s.N; ++r)
      for (std::size_t c = 0; c < s.ld_out; ++c)
        ASSERT_EQ(t[O::out][r * s.ld_out + c], c < s.OC ? bias[c] : kUnwritten) << r << "," << c;
    // beta 1 onto out = bias is the bias term of the reference.
    expect_replay_matches(unfused.product, t, {O::out, O::in, false, O::weight, true},
                          [&s](O o) { return s.dims(o); }, 1, 1.0f, 1.0f);
  }
}

// With a residual, the broadcast is D = bias + residual (beta 1 on it: an fp32 sum, one rounding), exact here in
// fp32 but for that one rounding, and the product accumulates onto it without reading the residual again.
TEST(GemmPlan, TheUnfusedBiasOntoAResidualAddsTheResidualInTheBroadcast) {
  std::mt19937 rng(4);
  for (const MatmulShape& s : kMatmulShapes) {
    SCOPED_TRACE(s.describe());
    Tensors t = s.random_tensors(rng);
    const std::vector<float> bias = random_floats(s.OC, rng), residual = t.at(O::residual);
    t[O::bias] = bias;
    t[O::ones] = std::vector<float>(s.N, 1.0f);
    const UnfusedBias unfused =
        unfused_bias_plans(with_residual(matmul_forward_plan(s.N, s.C, s.OC, s.ld_out, true)));
    EXPECT_EQ(gemm_plan_problem(unfused.broadcast), "");
    EXPECT_TRUE(unfused.broadcast.residual);
    EXPECT_FALSE(unfused.product.residual);
    replay(unfused.broadcast, t);
    for (std::size_t r = 0; r < s.N; ++r)
      for (std::size_t c = 0; c < s.ld_out; ++c)
        ASSERT_EQ(t[O::out][r * s.ld_out + c], c < s.OC ? bias[c] + residual[r * s.ld_out + c] : kUnwritten)
            << r << "," << c;
    expect_replay_matches(unfused.product, t, {O::out, O::in, false, O::weight, true},
                          [&s](O o) { return s.dims(o); }, 1, 1.0f, 1.0f);
  }
}

// ---- activation epilogues ------------------------------------------------------------------------------------
// What the epilogue computes is the GEMM runner's (the harness replays it, the op tests compare the fused ops with
// the cpu backend's composition); the plan is the plain product's with the activation set, and its parts keep it.

TEST(GemmPlan, AnActivationPlanIsThePlainProductWithItsEpilogue) {
  for (const MatmulShape& s : kMatmulShapes) {
    SCOPED_TRACE(s.describe());
    for (const bool bias : {false, true}) {
      GemmPlan gelu = matmul_forward_plan(s.N, s.C, s.OC, s.ld_out, bias, GemmActivation::gelu);
      EXPECT_EQ(gelu.activation, GemmActivation::gelu);
      EXPECT_EQ(gemm_plan_problem(gelu), "");
      gelu.activation = GemmActivation::none;
      EXPECT_EQ(gelu, matmul_forward_plan(s.N, s.C, s.OC, s.ld_out, bias));
    }
    GemmPlan dgelu = matmul_backward_input_plan(s.N, s.C, s.OC, s.ld_out, GemmActivation::dgelu);
    EXPECT_EQ(dgelu.activation, GemmActivation::dgelu);
    EXPECT_EQ(gemm_plan_problem(dgelu), "");
    dgelu.activation = GemmActivation::none;
    EXPECT_EQ(dgelu, matmul_backward_input_plan(s.N, s.C, s.OC, s.ld_out));
  }
}

// Fusable: k kept whole by the aligned parts (a multiple of 8, or below 8) and ldc a multiple of 8 (cuBLASLt's
// rule for the GELU input's leading dimension). The parts of a fusable plan all carry the activation and the full
// k; their m and n still split where ragged.
TEST(GemmPlan, AnActivationRunsOnlyWhereTheSumStaysWholeAndPreIsAligned) {
  EXPECT_TRUE(gemm_activation_fusable(matmul_forward_plan(64, 768, 3072, 3072, true, GemmActivation::gelu)));
  EXPECT_TRUE(gemm_activation_fusable(matmul_backward_input_plan(64, 3072, 768, 768, GemmActivation::dgelu)));
  EXPECT_TRUE(gemm_activation_fusable(matmul_forward_plan(5, 3, 16, 16, true, GemmActivation::gelu)));      // k < 8
  EXPECT_FALSE(gemm_activation_fusable(matmul_forward_plan(5, 13, 16, 16, true, GemmActivation::gelu)));    // k 13
  EXPECT_FALSE(gemm_activation_fusable(matmul_forward_plan(5, 16, 12, 12, true, GemmActivation::gelu)));    // ldc 12
  EXPECT_FALSE(gemm_activation_fusable(matmul_backward_input_plan(5, 12, 16, 16, GemmActivation::dgelu)));  // ldc
  EXPECT_FALSE(gemm_activation_fusable(matmul_backward_input_plan(5, 16, 20, 20, GemmActivation::dgelu)));  // k 20
  const GemmPlan ragged_rows = matmul_forward_plan(33, 16, 24, 24, true, GemmActivation::gelu);  // n = 33 splits
  ASSERT_TRUE(gemm_activation_fusable(ragged_rows));
  const std::vector<GemmPart> parts = gemm_aligned_parts(ragged_rows);
  ASSERT_EQ(parts.size(), 2u);
  std::int64_t rows = 0;
  for (const GemmPart& part : parts) {
    EXPECT_EQ(part.plan.activation, GemmActivation::gelu);
    EXPECT_EQ(part.plan.k, 16);
    EXPECT_EQ(part.offset_c, rows * 24);  // pre, of D's layout, at the same offset
    rows += part.plan.n;
  }
  EXPECT_EQ(rows, 33);
}

TEST(GemmPlan, ProblemsNameActivationsOnBatchedPlansAndDgeluWithABias) {
  GemmPlan batched_gelu = attention_scores_plan(2, 16, 32, 4);
  batched_gelu.activation = GemmActivation::gelu;
  EXPECT_EQ(gemm_plan_problem(batched_gelu), "an activation epilogue on a batched plan");
  GemmPlan dgelu_with_bias = matmul_backward_input_plan(4, 16, 8, 8, GemmActivation::dgelu);
  dgelu_with_bias.bias_epilogue = true;
  EXPECT_EQ(gemm_plan_problem(dgelu_with_bias), "dgelu takes no bias");
}

// ---- the fields, against the table of docs/cuda.md ---------------------------------------------------------------

TEST(GemmPlan, MatmulPlansMatchTheTableOfCudaMd) {
  const std::int64_t N = 6, C = 16, OC = 24, Vp = 64;
  struct Row {
    GemmPlan plan;
    O a;
    GemmOp transa;
    O b;
    GemmOp transb;
    std::vector<std::int64_t> m_n_k_lda_ldb_ldc;
    float beta;  // 1 for dweight: the backend contract accumulates parameter gradients
  };
  const Row table[] = {
      {matmul_forward_plan(N, C, OC, OC, true), O::weight, GemmOp::T, O::in, GemmOp::N, {OC, N, C, C, C, OC}, 0.0f},
      {matmul_backward_input_plan(N, C, OC, OC), O::weight, GemmOp::N, O::dout, GemmOp::N, {C, N, OC, C, OC, C},
       0.0f},
      {matmul_backward_weight_plan(N, C, OC, OC), O::in, GemmOp::N, O::dout, GemmOp::T, {C, OC, N, C, OC, C}, 1.0f},
      // out and dout in rows of Vp: only their ld changes.
      {matmul_forward_plan(N, C, OC, Vp, true), O::weight, GemmOp::T, O::in, GemmOp::N, {OC, N, C, C, C, Vp}, 0.0f},
      {matmul_backward_input_plan(N, C, OC, Vp), O::weight, GemmOp::N, O::dout, GemmOp::N, {C, N, OC, C, Vp, C},
       0.0f},
      {matmul_backward_weight_plan(N, C, OC, Vp), O::in, GemmOp::N, O::dout, GemmOp::T, {C, OC, N, C, Vp, C}, 1.0f},
  };
  for (const Row& row : table) {
    const GemmPlan& p = row.plan;
    SCOPED_TRACE(std::string(operand_name(p.c)));
    EXPECT_EQ(p.a, row.a);
    EXPECT_EQ(p.transa, row.transa);
    EXPECT_EQ(p.b, row.b);
    EXPECT_EQ(p.transb, row.transb);
    EXPECT_EQ((std::vector<std::int64_t>{p.m, p.n, p.k, p.lda, p.ldb, p.ldc}), row.m_n_k_lda_ldb_ldc);
    EXPECT_EQ(p.beta, row.beta);
    EXPECT_EQ(p.alpha, 1.0f);
    EXPECT_EQ(p.batch, 1);
    EXPECT_EQ(p.bias_epilogue, p.c == O::out);
  }
  EXPECT_FALSE(matmul_forward_plan(N, C, OC, OC, false).bias_epilogue);
}

// ---- what cuBLASLt requires of a call, checked on the host ---------------------------------------------------

std::vector<GemmPlan> matmul_plans(const MatmulShape& s) {
  std::vector<GemmPlan> plans;
  for (const ReplayCase& c : kReplayCases)
    if (c.matmul) plans.push_back(plan_of(c, s));
  return plans;
}

std::vector<GemmPlan> attention_plans(const AttentionShape& s) {
  std::vector<GemmPlan> plans;
  for (const ReplayCase& c : kReplayCases)
    if (c.attention) plans.push_back(plan_of(c, s));
  return plans;
}

TEST(GemmPlan, EveryPlanIsAValidGemmCall) {
  for (const MatmulShape& s : kMatmulShapes)
    for (const GemmPlan& p : matmul_plans(s)) EXPECT_EQ(gemm_plan_problem(p), "") << s.describe();
  for (const AttentionShape& s : kAttentionShapes)
    for (const GemmPlan& p : attention_plans(s)) {
      EXPECT_EQ(gemm_plan_problem(p), "") << s.describe() << " output " << operand_name(p.c);
      // Heads one after another, none overlapping: the strides are the head's whole matrices.
      EXPECT_EQ(p.stride_c, p.ldc * p.n) << operand_name(p.c);
    }
}

TEST(GemmPlan, ProblemNamesWhatIsWrongWithABrokenPlan) {
  const GemmPlan good = matmul_forward_plan(4, 16, 8, 8, false);  // A = weight stored [C = 16 rows, OC], op T
  GemmPlan p = good;
  p.lda = 15;
  EXPECT_EQ(gemm_plan_problem(p), "lda is below the rows of A as stored");
  p = good;
  p.ldb = 15;
  EXPECT_EQ(gemm_plan_problem(p), "ldb is below the rows of B as stored");
  p = good;
  p.ldc = 7;
  EXPECT_EQ(gemm_plan_problem(p), "ldc is below m");
  p = good;
  p.k = 0;
  EXPECT_EQ(gemm_plan_problem(p), "m, n and k must be at least 1");
  p = attention_scores_plan(2, 4, 8, 2);
  p.stride_c = p.ldc * p.n - 1;
  EXPECT_EQ(gemm_plan_problem(p), "batch members of D overlap (stride_c < ldc·n)");
  p.stride_c = -1;
  EXPECT_EQ(gemm_plan_problem(p), "a stride is negative");
}

TEST(GemmPlan, Bf16AlignedWhereChannelsHeadSizeAndTAreMultiplesOf8) {
  // Every ld and stride × 2 bytes a multiple of 16 where C, OC (matmul) and hs, T (attention) are multiples of 8;
  // N never enters an ld, so an odd row count keeps the alignment.
  for (const MatmulShape s : {MatmulShape{1, 8, 8, 8}, MatmulShape{7, 24, 40, 40}, MatmulShape{33, 768, 2304, 2304}})
    for (const GemmPlan& p : matmul_plans(s)) EXPECT_TRUE(gemm_plan_aligned(p, 2)) << s.describe();
  for (const AttentionShape s : {AttentionShape{1, 8, 8, 1}, AttentionShape{3, 16, 64, 4},
                                 AttentionShape{2, 1024, 768, 12}})
    for (const GemmPlan& p : attention_plans(s))
      EXPECT_TRUE(gemm_plan_aligned(p, 2)) << s.describe() << " output " << operand_name(p.c);

  // Where they are not, some ld or stride breaks it, and the backend must fall back or refuse: C = 13 (lda of the
  // forward), OC = 12 (ldc of the forward), hs = 4 (every [T,hs] ld), T = 12 (ld of scores and probs).
  EXPECT_FALSE(gemm_plan_aligned(matmul_forward_plan(8, 13, 16, 16, false), 2));
  EXPECT_FALSE(gemm_plan_aligned(matmul_forward_plan(8, 16, 12, 12, false), 2));
  EXPECT_FALSE(gemm_plan_aligned(matmul_backward_weight_plan(8, 16, 12, 12), 2));
  EXPECT_FALSE(gemm_plan_aligned(attention_output_plan(1, 8, 8, 2), 2));
  EXPECT_FALSE(gemm_plan_aligned(attention_scores_plan(1, 12, 16, 2), 2));
  EXPECT_FALSE(gemm_plan_aligned(attention_dv_plan(1, 12, 16, 2), 2));
  // GPT-2's LM head: V = 50,257 output channels make every plan's ld of out or dout odd; the logits' rows padded to
  // 50,304 (ModelConfig::logits_row_length) align them all.
  for (const GemmPlan& p : matmul_plans(MatmulShape{1024, 768, 50257, 50257})) EXPECT_FALSE(gemm_plan_aligned(p, 2));
  for (const GemmPlan& p : matmul_plans(MatmulShape{1024, 768, 50257, 50304})) EXPECT_TRUE(gemm_plan_aligned(p, 2));
  // fp32 needs only multiples of 4 elements.
  EXPECT_TRUE(gemm_plan_aligned(attention_scores_plan(1, 12, 16, 4), 4));
}

// Every attention product as its causal row blocks of 1, 2, 3 and 5 rows and of the whole T: the product wherever
// the mask leaves it (on and below the diagonal of scores and dprobs, everywhere in y, dq, dv and dk), within the
// same bound, with probs and dscores zero above the diagonal as the softmax kernels leave them — the terms a block
// leaves out are those exact zeros.
TEST(GemmPlan, AttentionProductsInCausalRowBlocksMatchWhereTheMaskLeavesThem) {
  std::mt19937 rng(5);
  for (const ReplayCase& c : kReplayCases) {
    if (!c.attention) continue;
    SCOPED_TRACE(c.name);
    for (const AttentionShape& s : kAttentionShapes)
      for (const std::size_t block : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(5), s.T}) {
        SCOPED_TRACE(s.describe() + " block " + std::to_string(block));
        Tensors t = s.random_tensors(rng);
        for (const O causal : {O::probs, O::dscores})
          for (std::size_t h = 0; h < s.batch(); ++h)
            for (std::size_t i = 0; i < s.T; ++i)
              for (std::size_t j = i + 1; j < s.T; ++j) t[causal][(h * s.T + i) * s.T + j] = 0.0f;
        expect_replay_matches(plan_of(c, s), t, c.product, [&s](O o) { return s.dims(o); }, s.batch(),
                              c.scaled ? s.scale() : 1.0f, c.beta, nullptr, {Run::causal_blocks, block});
      }
  }
}

// gpt2-124m's T = 1024 in 8 blocks of 128 rows: block r of the scores computes its 128 queries against keys
// 0..128(r+1), y's sums run over those keys, dv's over the queries from 128r on; 9/16 of each product in all.
TEST(GemmPlan, CausalRowBlocksOfGpt2SmallComputeNineSixteenthsOfEachProduct) {
  const std::size_t B = 1, T = 1024, C = 768, NH = 12, block = attention_causal_block(T);
  ASSERT_EQ(block, 128u);
  const auto scores = causal_row_blocks(attention_scores_plan(B, T, C, NH), block);
  const auto y = causal_row_blocks(attention_output_plan(B, T, C, NH), block);
  const auto dv = causal_row_blocks(attention_dv_plan(B, T, C, NH), block);
  ASSERT_EQ(scores.size(), 8u);
  ASSERT_EQ(y.size(), 8u);
  ASSERT_EQ(dv.size(), 8u);
  std::int64_t computed = 0;
  for (std::int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(scores[r].plan.n, 128);
    EXPECT_EQ(scores[r].plan.m, 128 * (r + 1));                // keys
    EXPECT_EQ(scores[r].offset_c, 128 * r * std::int64_t(T));  // the block's first query row
    EXPECT_EQ(y[r].plan.k, 128 * (r + 1));
    EXPECT_EQ(y[r].offset_c, 128 * r * 64);  // y's rows of hs = 64
    EXPECT_EQ(dv[r].plan.k, std::int64_t(T) - 128 * r);
    EXPECT_EQ(dv[r].offset_a, 128 * r * 64);  // dy from query 128r on
    computed += scores[r].plan.m * scores[r].plan.n;
    EXPECT_EQ(scores[r].plan.batch, std::int64_t(B * NH));
  }
  EXPECT_EQ(computed * 16, std::int64_t(T * T) * 9);
  // One block of the whole T is the plan itself.
  const GemmPlan whole = attention_dk_plan(B, T, C, NH);
  const auto one = causal_row_blocks(whole, T);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].plan, whole);
}

// The LM head of gpt2-124m at 64 windows: m = V = 50257 runs as 50256 rows and 1; the weight gradient's n = V as
// 50256 columns and 1; the input gradient's k = V as the 1 term first (beta 0), then the 50256 onto it (beta 1).
TEST(GemmAlignedParts, SplitTheLmHeadsVocabularyIntoAMultipleOf8AndTheRest) {
  const std::size_t N = 65536, C = 768, V = 50257, Vp = 50304;
  const auto forward = gemm_aligned_parts(matmul_forward_plan(N, C, V, Vp, false));
  ASSERT_EQ(forward.size(), 2u);
  EXPECT_EQ(forward[0].plan.m, 50256);
  EXPECT_EQ(forward[1].plan.m, 1);
  EXPECT_EQ(forward[1].offset_a, 50256 * std::int64_t(C));  // weight [V,C] used transposed: row 50256
  EXPECT_EQ(forward[1].offset_b, 0);
  EXPECT_EQ(forward[1].offset_c, 50256);  // column 50256 of every row of logits

  const auto weight = gemm_aligned_parts(matmul_backward_weight_plan(N, C, V, Vp));
  ASSERT_EQ(weight.size(), 2u);
  EXPECT_EQ(weight[0].plan.n, 50256);
  EXPECT_EQ(weight[1].plan.n, 1);
  EXPECT_EQ(weight[1].offset_b, 50256);                    // dout used transposed: its column 50256
  EXPECT_EQ(weight[1].offset_c, 50256 * std::int64_t(C));  // dweight's row 50256
  EXPECT_EQ(weight[0].plan.beta, 1.0f);
  EXPECT_EQ(weight[1].plan.beta, 1.0f);

  const auto input = gemm_aligned_parts(matmul_backward_input_plan(N, C, V, Vp));
  ASSERT_EQ(input.size(), 2u);
  EXPECT_EQ(input[0].plan.k, 1);
  EXPECT_EQ(input[0].plan.beta, 0.0f);
  EXPECT_EQ(input[0].offset_a, 50256 * std::int64_t(C));  // weight's row 50256
  EXPECT_EQ(input[0].offset_b, 50256);                    // dout's column 50256
  EXPECT_EQ(input[0].offset_c, 0);
  EXPECT_EQ(input[1].plan.k, 50256);
  EXPECT_EQ(input[1].plan.beta, 1.0f);
  EXPECT_EQ(input[1].offset_a, 0);
}

// Every part of every plan has each of m, n, k a multiple of 8 or below 8, and a plan with none ragged (or every
// dimension below 8) is its only part, unchanged; the bias epilogue goes with the first part along k only.
TEST(GemmAlignedParts, EveryPartIsAlignedOrSmallAndAnAlignedPlanIsItsOwnPart) {
  for (const GemmPlan& p : {matmul_forward_plan(33, 20, 17, 24, true), matmul_backward_input_plan(33, 20, 17, 17),
                            matmul_backward_weight_plan(33, 20, 17, 17), attention_output_plan(3, 9, 10, 1),
                            attention_scores_plan(2, 13, 30, 3)}) {
    const auto parts = gemm_aligned_parts(p);
    EXPECT_GT(parts.size(), 1u);
    std::int64_t bias_parts_per_block = 0;
    for (const GemmPart& part : parts) {
      for (const std::int64_t d : {part.plan.m, part.plan.n, part.plan.k})
        EXPECT_TRUE(d % kGemmAlignedMultiple == 0 || d < kGemmAlignedMultiple) << d;
      EXPECT_EQ(gemm_plan_problem(part.plan), "");
      bias_parts_per_block += part.plan.bias_epilogue;
    }
    // m and n split into at most 4 blocks of D, each with its bias once.
    if (p.bias_epilogue) {
      EXPECT_EQ(bias_parts_per_block, 4);
    }
  }
  for (const GemmPlan& p : {matmul_forward_plan(64, 768, 2304, 2304, true), attention_scores_plan(2, 16, 32, 4),
                            matmul_forward_plan(3, 5, 7, 7, false)}) {
    const auto parts = gemm_aligned_parts(p);
    ASSERT_EQ(parts.size(), 1u);
    EXPECT_EQ(parts[0].plan, p);
    EXPECT_EQ(parts[0].offset_a + parts[0].offset_b + parts[0].offset_c + parts[0].offset_bias, 0);
  }
}

}  // namespace
}  // namespace dptrain
