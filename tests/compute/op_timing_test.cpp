// The timing decorator (op_timing_backend.hpp): the wrapped cpu backend computes bitwise what the bare one does,
// each call is recorded once with the FLOPs of the formula, a disabled timer records nothing, reset clears, and
// calls from another thread (the comm executor's) get rows of their own.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dptrain/compute/op_timing_backend.hpp"

namespace dptrain {
namespace {

std::vector<float> uniform(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const OpTimeRow* find(const std::vector<OpTimeRow>& rows, const std::string& op, bool other_thread = false) {
  const auto it = std::find_if(rows.begin(), rows.end(),
                               [&](const OpTimeRow& r) { return r.op == op && r.other_thread == other_thread; });
  return it == rows.end() ? nullptr : &*it;
}

class OpTiming : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> bare = make_cpu_backend();
  std::shared_ptr<OpTimes> times = std::make_shared<OpTimes>();
  std::unique_ptr<Backend> timed = make_op_timing_backend(make_cpu_backend(), times);
  std::mt19937 rng{11};
  // Two windows of T = 4 rows, C = 8 channels (2 heads), OC = 12.
  static constexpr std::size_t B = 2, T = 4, N = B * T, C = 8, NH = 2, OC = 12;
  std::vector<float> in = uniform(rng, N*C), w = uniform(rng, OC*C), bias = uniform(rng, OC);
  std::vector<float> dout = uniform(rng, N*OC), qkv = uniform(rng, N * 3 * C), datty = uniform(rng, N*C);

  // Every GEMM-bearing op once on `be`, its outputs in one vector.
  std::vector<float> run_ops(Backend& be) {
    std::vector<float> out(N * OC), din(N * C, 0), dw(OC * C, 0), dbias(OC, 0), dw2(OC * C, 0);
    std::vector<float> atty(N * C), probs(B * NH * T * T), dqkv(N * 3 * C, 0);
    be.matmul_forward(out.data(), in.data(), w.data(), bias.data(), N, T, C, OC, OC);
    be.matmul_backward(din.data(), dw.data(), dbias.data(), dout.data(), in.data(), w.data(), N, T, C, OC, OC);
    be.matmul_backward(nullptr, dw2.data(), nullptr, dout.data(), in.data(), w.data(), N, T, C, OC, OC);
    be.attention_forward(atty.data(), probs.data(), qkv.data(), B, T, C, NH);
    be.attention_backward(dqkv.data(), datty.data(), qkv.data(), atty.data(), probs.data(), B, T, C, NH);
    std::vector<float> all;
    for (const auto* v : {&out, &din, &dw, &dbias, &dw2, &atty, &probs, &dqkv})
      all.insert(all.end(), v->begin(), v->end());
    return all;
  }
};

TEST_F(OpTiming, ForwardsEverythingUntimedAsTheInnerBackend) {
  EXPECT_EQ(timed->name(), "cpu");
  EXPECT_EQ(timed->activation_dtype(), bare->activation_dtype());
  EXPECT_EQ(timed->weight_dtype(), bare->weight_dtype());
  EXPECT_EQ(timed->gradient_dtype(), bare->gradient_dtype());
  EXPECT_EQ(timed->guarantees().repeatable, bare->guarantees().repeatable);
}

TEST_F(OpTiming, SameBitsAndTheFormulasFlops) {
  times->set_enabled(true);
  const std::vector<float> expected = run_ops(*bare), got = run_ops(*timed);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << i;  // bitwise (no NaNs here)

  const std::vector<OpTimeRow> rows = times->rows();
  ASSERT_EQ(rows.size(), 4u);
  const OpTimeRow* mf = find(rows, "matmul_forward");
  const OpTimeRow* mb = find(rows, "matmul_backward");
  const OpTimeRow* af = find(rows, "attention_forward");
  const OpTimeRow* ab = find(rows, "attention_backward");
  ASSERT_TRUE(mf && mb && af && ab);
  EXPECT_EQ(mf->calls, 1u);
  EXPECT_EQ(mf->flops, 2.0 * N * C * OC);
  EXPECT_EQ(mb->calls, 2u);
  EXPECT_EQ(mb->flops, 2.0 * N * C * OC * 2 + 2.0 * N * C * OC);  // with din, then without
  EXPECT_EQ(af->calls, 1u);
  EXPECT_EQ(af->flops, double(B * NH) * 2 * (2.0 * T * T * (C / NH)));
  EXPECT_EQ(ab->calls, 1u);
  EXPECT_EQ(ab->flops, double(B * NH) * 4 * (2.0 * T * T * (C / NH)));
  for (const OpTimeRow& row : rows) {
    EXPECT_GE(row.seconds, 0) << row.op;
    EXPECT_FALSE(row.other_thread) << row.op;
  }
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].seconds, rows[i].seconds);  // longest first
}

// The matmuls are also kept by shape (rows × in → out): each shape's calls, time and FLOPs, adding up to the op's
// row; attention and the other ops have no shape rows. A second shape (the LM head's, say) gets a row of its own.
TEST_F(OpTiming, MatmulsAreAlsoTimedByShape) {
  times->set_enabled(true);
  run_ops(*timed);
  std::vector<float> wide_out(N * 2 * OC), wide_w = uniform(rng, 2 * OC * C);
  timed->matmul_forward(wide_out.data(), in.data(), wide_w.data(), nullptr, N, T, C, 2 * OC, 2 * OC);
  const std::vector<OpTimeRow> shapes = times->shape_rows(), rows = times->rows();
  ASSERT_EQ(shapes.size(), 3u);
  const std::string own = fmt::format("{}×{}→{}", N, C, OC), wide = fmt::format("{}×{}→{}", N, C, 2 * OC);
  // In op order (matmul_forward before matmul_backward), each op's shapes together make its row.
  EXPECT_EQ(shapes[0].op, "matmul_forward");
  EXPECT_EQ(shapes[1].op, "matmul_forward");
  EXPECT_EQ(shapes[2].op, "matmul_backward");
  EXPECT_EQ(shapes[2].shape, own);
  EXPECT_EQ(shapes[2].calls, 2u);
  EXPECT_EQ(shapes[2].flops, find(rows, "matmul_backward")->flops);
  const OpTimeRow* mf_own = shapes[0].shape == own ? &shapes[0] : &shapes[1];
  const OpTimeRow* mf_wide = shapes[0].shape == wide ? &shapes[0] : &shapes[1];
  ASSERT_EQ(mf_own->shape, own);
  ASSERT_EQ(mf_wide->shape, wide);
  EXPECT_EQ(mf_own->flops, 2.0 * N * C * OC);
  EXPECT_EQ(mf_wide->flops, 2.0 * N * C * 2 * OC);
  EXPECT_EQ(mf_own->calls + mf_wide->calls, find(rows, "matmul_forward")->calls);
  EXPECT_DOUBLE_EQ(mf_own->seconds + mf_wide->seconds, find(rows, "matmul_forward")->seconds);
  EXPECT_GE(shapes[0].seconds, shapes[1].seconds);  // an op's shapes longest first
  times->reset();
  EXPECT_TRUE(times->shape_rows().empty());
}

TEST_F(OpTiming, DisabledRecordsNothingAndResetClears) {
  const std::vector<float> expected = run_ops(*bare);
  EXPECT_EQ(run_ops(*timed), expected);  // disabled: forwarded all the same
  EXPECT_TRUE(times->rows().empty());
  times->set_enabled(true);
  run_ops(*timed);
  EXPECT_EQ(times->rows().size(), 4u);
  times->reset();
  EXPECT_TRUE(times->rows().empty());
}

TEST_F(OpTiming, AnotherThreadsCallsAreRowsOfTheirOwn) {
  times->set_enabled(true);
  std::vector<float> acc(64, 1.0f), incoming(64, 2.0f);
  timed->reduce_add(acc.data(), incoming.data(), acc.size(), DType::f32);
  std::thread comm([&] {
    for (int i = 0; i < 3; ++i) timed->reduce_add(acc.data(), incoming.data(), acc.size(), DType::f32);
  });
  comm.join();
  EXPECT_EQ(acc[0], 9.0f);
  const std::vector<OpTimeRow> rows = times->rows();
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_TRUE(find(rows, "reduce_add", false) && find(rows, "reduce_add", true));
  EXPECT_EQ(find(rows, "reduce_add", false)->calls, 1u);
  EXPECT_EQ(find(rows, "reduce_add", true)->calls, 3u);
  EXPECT_TRUE(rows.back().other_thread);  // the constructing thread's rows first
}

TEST_F(OpTiming, AcquireWeightsIsTimedReleaseIsNot) {
  timed->reserve_weight_views(16, 1);
  std::vector<bf16> weights(16);
  times->set_enabled(true);
  const void* view = timed->acquire_weights(weights.data(), weights.size());
  timed->release_weights(view);
  const std::vector<OpTimeRow> rows = times->rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "acquire_weights");
  EXPECT_EQ(rows[0].calls, 1u);
  EXPECT_EQ(rows[0].flops, 0);
}

}  // namespace
}  // namespace dptrain
