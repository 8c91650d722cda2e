// kernels/encoder.cu on the CPU harness against the cpu backend's embedding (fp32 on the BF16 inputs widened).
//
// Both directions are bitwise checks. Forward: the kernel adds two BF16 values in fp32 exactly as the cpu backend
// does and rounds once, so it equals to_bf16 of the cpu backend's output. Backward: the cpu backend adds each row's
// fp32 dout into dwte[token] and dwpe[position] in row order; the kernels add every destination element's rows in
// row order too, starting from its current value, so dwte and dwpe are bitwise equal (and so is a second run).
//
// Shapes: one row, one channel; C not a multiple of 32 nor of the 256 channels of a block (two channel groups);
// more rows than one 256-row tile and several token buckets; a small vocabulary (many tokens per bucket, so the
// 16-slot cache of a block evicts), a token that recurs in most rows, and tokens that all fall in one cache slot.
#include "cuda_on_cpu.hpp"

#include "../../kernels/encoder.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

struct Shape {
  std::size_t N, T, C, V;
};

class Encoder : public KernelTest {
 protected:

  std::vector<std::int32_t> random_tokens(std::size_t N, std::size_t V) {
    std::uniform_int_distribution<std::int32_t> u(0, std::int32_t(V) - 1);
    std::vector<std::int32_t> t(N);
    for (std::int32_t& x : t) x = u(rng);
    return t;
  }

  // Runs both backward kernels on dout and tokens from the given gradients, against the cpu backend.
  void check_backward(const Shape& s, const std::vector<std::int32_t>& tokens) {
    const std::vector<bf16> dout = random_bf16(rng, s.N * s.C, -1, 1);
    const std::vector<float> dwte0 = random_f32(rng, s.V * s.C, -1, 1), dwpe0 = random_f32(rng, s.T * s.C, -1, 1);
    std::vector<float> ref_wte = dwte0, ref_wpe = dwpe0;
    const std::vector<float> doutf = widen(dout);
    cpu->embedding_backward(ref_wte.data(), ref_wpe.data(), doutf.data(), tokens.data(), s.N, s.T, s.C);
    for (int run = 0; run < 2; ++run) {  // the second run from the same start: the same bits again
      std::vector<float> dwte = dwte0, dwpe = dwpe0;
      cuda_on_cpu::launch(kernels::embedding_backward_wte, kernels::embedding_backward_wte_launch(s.N, s.C),
                          dwte.data(), dout.data(), tokens.data(), s.N, s.C);
      cuda_on_cpu::launch(kernels::embedding_backward_wpe, kernels::embedding_backward_wpe_launch(s.T, s.C),
                          dwpe.data(), dout.data(), s.N, s.T, s.C);
      for (std::size_t i = 0; i < dwte.size(); ++i)
        ASSERT_EQ(bits(dwte[i]), bits(ref_wte[i])) << "run " << run << " dwte token " << i / s.C << " c " << i % s.C;
      for (std::size_t i = 0; i < dwpe.size(); ++i)
        ASSERT_EQ(bits(dwpe[i]), bits(ref_wpe[i])) << "run " << run << " dwpe t " << i / s.C << " c " << i % s.C;
    }
  }
};

const Shape kShapes[] = {{1, 1, 1, 3}, {5, 5, 37, 7}, {12, 4, 256, 9}, {600, 8, 300, 200}, {700, 7, 33, 5000}};

TEST_F(Encoder, ForwardIsBitwiseTheRoundedCpuSum) {
  // One thread per element: kShapes' smaller half, and a fifth of its largest (the harness starts a thread each).
  for (const Shape& s : {kShapes[0], kShapes[1], kShapes[2], Shape{40, 8, 300, 200}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " T " << s.T << " C " << s.C << " V " << s.V);
    const std::vector<std::int32_t> tokens = random_tokens(s.N, s.V);
    const std::vector<bf16> wte = random_bf16(rng, s.V * s.C, -1, 1), wpe = random_bf16(rng, s.T * s.C, -0.1f, 0.1f);
    const std::vector<float> wtef = widen(wte), wpef = widen(wpe);
    std::vector<float> ref(s.N * s.C);
    cpu->embedding_forward(ref.data(), tokens.data(), wtef.data(), wpef.data(), s.N, s.T, s.C);
    std::vector<bf16> out(s.N * s.C);
    cuda_on_cpu::launch(kernels::embedding_forward, kernels::embedding_forward_launch(s.N, s.C), out.data(),
                        tokens.data(), wte.data(), wpe.data(), s.N, s.T, s.C);
    for (std::size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(out[i].bits, to_bf16(ref[i]).bits) << "row " << i / s.C << " c " << i % s.C;
  }
}

TEST_F(Encoder, BackwardIsBitwiseTheCpuRowOrderSum) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " T " << s.T << " C " << s.C << " V " << s.V);
    check_backward(s, random_tokens(s.N, s.V));
  }
}

TEST_F(Encoder, BackwardWithAFrequentTokenAndCacheConflicts) {
  const Shape s{700, 7, 300, 1000};
  const unsigned buckets = kernels::wte_buckets(s.N);
  // Tokens ≡ 5 (mod buckets) in one cache slot: 5 + k·buckets·slots, interleaved with a token in most rows.
  std::vector<std::int32_t> tokens = random_tokens(s.N, s.V);
  for (std::size_t n = 0; n < s.N; ++n) {
    if (n % 3 == 0) tokens[n] = std::int32_t(5 + (n / 3 % 4) * buckets * kernels::kWteSlots);
    if (n % 3 == 1) tokens[n] = 17;
  }
  ASSERT_LT(std::size_t(5 + 3 * buckets * kernels::kWteSlots), s.V);
  check_backward(s, tokens);
  // Every row the same token.
  check_backward(s, std::vector<std::int32_t>(s.N, 999));
}

}  // namespace
}  // namespace dptrain
