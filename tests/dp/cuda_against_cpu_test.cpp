// The cuda backend against the cpu backend, the reference it is tested against: the whole model's loss and
// gradient on the same BF16 weights and tokens (tiny and small shapes), 50 training steps of the small shape, and
// bitwise repeatability. On a GPU ("cuda"; skipped, with the reason, where the build has no CUDA or no GPU is
// usable) and, in every build, the same backend code on the CPU harness with the GEMM plans replayed by BLAS
// (kCudaOnCpu: the harness runs every GPU thread as a fiber, so its training runs are short ones of the tiny shape).
//
// Tolerances. The cpu backend computes in fp32 from BF16 weights; the cuda one stores every activation in BF16
// (8 significant bits: one rounding moves a value by ≤ 2⁻⁹ relative, ≈ 0.2 %). A layer's output carries the
// roundings of its inputs and its own, so after the L blocks, the head and the backward pass (about 10 stored
// tensors per block each way) a gradient tensor differs by a few per cent of its norm, and the loss — a mean over
// all positions, where independent rounding errors average out — by far less. The bounds: relative L2 error of
// each gradient tensor ≤ 5 %, mean loss within 0.5 %. Training: AdamW normalises the update, so BF16 noise in the
// gradient changes every step's update by a few per cent of the learning rate; over 50 steps the losses of the
// two runs drift apart by a small fraction of how far they fell: within 2 % of the loss at every step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/gpt.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/model/layout.hpp"
#include "../kernels/cuda_on_cpu_backend.hpp"

namespace dptrain {
namespace {

struct Gradient {
  double loss = 0;
  std::vector<float> grads;  // [N] flat
};

// The model's loss (mean over positions) and its gradient on `backend`, from BF16 weights w.
Gradient model_gradient(Backend& backend, const ParameterLayout& layout, const std::vector<bf16>& w,
                        const std::vector<std::int32_t>& windows, std::size_t n) {
  Device& device = backend.device();
  const std::size_t P = layout.total(), positions = n * std::size_t(layout.config().seq);
  Gpt gpt(layout, backend, n);
  Buffer weights(device, P * sizeof(bf16)), grads(device, P * element_size(backend.gradient_dtype()));
  Buffer loss(device, sizeof(double));
  device.upload(weights.data(), w.data(), P * sizeof(bf16));
  device.zero(grads.data(), grads.bytes());
  device.zero(loss.data(), sizeof(double));
  backend.reserve_weight_views(P, 2);
  const void* view = backend.acquire_weights(weights.as<bf16>(), P);
  const WeightAccess access = whole_weights(view, backend.weight_dtype());
  gpt.forward(windows.data(), n, access, loss.as<double>(), float(1.0 / double(positions)));
  gpt.backward(access, grads.data());
  backend.release_weights(view);
  Gradient g;
  device.synchronize();
  device.download(&g.loss, loss.data(), sizeof(double));
  g.loss /= double(positions);
  g.grads.resize(P);
  if (backend.gradient_dtype() == DType::f32) {
    device.download(g.grads.data(), grads.data(), P * sizeof(float));
  } else {
    std::vector<bf16> b(P);
    device.download(b.data(), grads.data(), P * sizeof(bf16));
    to_float(b.data(), g.grads.data(), P);
  }
  return g;
}

const ModelConfig kTiny{.vocab = 67, .seq = 16, .layers = 2, .width = 32, .heads = 2};
const ModelConfig kSmall{.vocab = 256, .seq = 128, .layers = 4, .width = 256, .heads = 4};

class CudaAgainstCpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (const std::string why = test::backend_under_test_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
  bool on_gpu() const { return GetParam() != test::kCudaOnCpu; }
  std::unique_ptr<Backend> cuda() const { return test::make_backend_under_test(GetParam()); }
  // What the training tests run: on a GPU the small shape, 8 windows, 50 steps; on the harness (which runs each
  // GPU thread as a CPU thread: a tiny step takes seconds) the tiny shape, 4 windows, 3 steps, too few to ask
  // that the loss fell, but every one compared with the cpu run's.
  struct Run {
    ModelConfig shape;
    std::size_t windows;
    int steps;
  };
  Run training_run() const { return on_gpu() ? Run{kSmall, 8, 50} : Run{kTiny, 4, 3}; }

  // n windows of Q + 1 tokens with structure a model can learn (a noisy counting sequence).
  static std::vector<std::int32_t> windows(const ModelConfig& c, std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::int32_t> w(n * std::size_t(c.seq + 1));
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = std::int32_t((i * 3 + (rng() % 4 == 0 ? rng() : 0)) % std::size_t(c.vocab));
    return w;
  }
};

TEST_P(CudaAgainstCpu, WholeModelLossAndGradient) {
  for (const ModelConfig& config : {kTiny, kSmall}) {
    SCOPED_TRACE(::testing::Message() << "width " << config.width);
    const ParameterLayout layout(config);
    std::vector<float> init(layout.total());
    initialise_parameters(layout, 7, init.data());
    std::vector<bf16> w(init.size());
    to_bf16(init.data(), w.data(), w.size());
    const std::size_t n = 4;
    const auto tokens = windows(config, n, 3);
    auto cpu = make_backend("cpu"), bf16_backend = cuda();
    const Gradient a = model_gradient(*cpu, layout, w, tokens, n);
    const Gradient b = model_gradient(*bf16_backend, layout, w, tokens, n);
    EXPECT_NEAR(b.loss, a.loss, 5e-3 * a.loss);
    double worst = 0;
    std::string worst_name;
    for (const ParameterEntry& e : layout.entries()) {
      double diff = 0, norm = 0;
      for (std::size_t i = e.offset; i < e.offset + e.numel; ++i) {
        diff += (double(b.grads[i]) - a.grads[i]) * (double(b.grads[i]) - a.grads[i]);
        norm += double(a.grads[i]) * a.grads[i];
      }
      EXPECT_LE(std::sqrt(diff), 5e-2 * std::sqrt(norm) + 1e-12) << e.name;
      if (norm > 0 && std::sqrt(diff / norm) > worst) worst = std::sqrt(diff / norm), worst_name = e.name;
    }
    // The margins, for the record: how far inside the bounds the backend is.
    std::printf(
        "%s, width %d: loss %.6f (cpu %.6f, relative %.2e); worst gradient tensor %s, relative L2 error "
        "%.2e\n",
        bf16_backend->attention_name().c_str(), config.width, b.loss, a.loss, std::abs(b.loss - a.loss) / a.loss,
        worst_name.c_str(), worst);
  }
}

TEST_P(CudaAgainstCpu, TrainingStepsFollowTheCpuLosses) {
  const auto [shape, n, steps] = training_run();
  auto cpu = make_backend("cpu"), bf16_backend = cuda();
  DataParallelEngine a(shape, *cpu, RankGroup{}, EngineSettings{}, n);
  DataParallelEngine b(shape, *bf16_backend, RankGroup{}, EngineSettings{}, n);
  a.initialise(11);
  b.initialise(11);
  const OptimizerSettings optimizer{.lr = 2e-3, .weight_decay = 0.1, .grad_clip = 1.0};
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    const auto tokens = windows(shape, n, std::uint32_t(100 + step));
    const StepResult ra = a.step(tokens.data(), n, optimizer), rb = b.step(tokens.data(), n, optimizer);
    ASSERT_TRUE(rb.finite) << "step " << step;
    EXPECT_NEAR(rb.loss, ra.loss, 2e-2 * ra.loss) << "step " << step;
    if (step == 0) first = rb.loss;
    last = rb.loss;
  }
  if (steps >= 50) {
    EXPECT_LT(last, 0.8 * first) << "the run did not learn";
  }
}

TEST_P(CudaAgainstCpu, TwoRunsAreBitwiseEqual) {
  const ModelConfig shape = training_run().shape;
  const std::size_t n = on_gpu() ? 4 : 2;
  std::vector<double> losses[2];
  std::uint64_t hashes[2];
  for (int run = 0; run < 2; ++run) {
    auto bf16_backend = cuda();
    DataParallelEngine e(shape, *bf16_backend, RankGroup{}, EngineSettings{.grad_accum = 2}, n);
    e.initialise(5);
    for (int step = 0; step < 2; ++step) {
      const auto tokens = windows(shape, n, std::uint32_t(step));
      losses[run].push_back(e.step(tokens.data(), n, {.lr = 1e-3, .weight_decay = 0.1, .grad_clip = 1.0}).loss);
    }
    hashes[run] = e.weights_hash();
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(hashes[0], hashes[1]);
}

std::vector<std::string> backends() {
  std::vector<std::string> names = test::gpu_backends_under_test();
  names.push_back(test::kCudaOnCpu);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaAgainstCpu, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace dptrain
