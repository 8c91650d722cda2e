// Where the compute module keeps things on the device: the ActivationArena's offset table (aligned, packed, no
// overlap; data(id) = base + offset), the Gpt's table of named activations for a small model, and the backend's
// weight views (the BF16 weights as the operations read them; fp32 copies on the cpu backend; reserved, acquired
// and released). Run on every backend of the factory.
//
// Every check here is exact: sizes, offsets and pointers are integers, and a view holds the BF16 weights exactly
// (BF16 → fp32 is exact). The model run through a view is compared bitwise with the model run on the same values
// uploaded directly, which needs the backend's repeatability promise (skipped otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "dptrain/compute/activation_arena.hpp"
#include "dptrain/compute/device.hpp"
#include "dptrain/compute/gpt.hpp"
#include "dptrain/model/activation_memory.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kAlign = Memory::kAlignment;

std::size_t round_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The invariants of an arena's table: every offset aligned and the previous tensor's end rounded up to the
// alignment (so in order, without overlap or a wasted gap), and bytes() the last tensor's end (not rounded up).
void expect_packed(const ActivationArena& arena) {
  std::size_t end = 0;
  for (const TensorSpec& t : arena.table()) {
    EXPECT_EQ(t.offset % kAlign, 0u) << t.name;
    EXPECT_GE(t.offset, end) << t.name << " overlaps the tensor before it";
    EXPECT_EQ(t.offset, round_up(end)) << t.name;
    end = t.offset + t.bytes();
  }
  EXPECT_EQ(arena.bytes(), end);
}

// The cpu device clears large regions with the OpenMP team in pieces and small ones, or any inside a parallel
// region, on the calling thread: in every case exactly the bytes asked for, whatever the size and alignment.
TEST(CpuDevice, ZeroClearsExactlyTheRegionAtAnySizeAndOffset) {
  const std::unique_ptr<Device> device = make_cpu_device();
  constexpr std::size_t kBytes = std::size_t(5) << 20;
  std::vector<unsigned char> memory(kBytes, 0xab), expected(kBytes, 0xab);
  const auto zero = [&](std::size_t offset, std::size_t bytes) {
    device->zero(memory.data() + offset, bytes);
    std::fill_n(expected.begin() + std::ptrdiff_t(offset), bytes, 0);
  };
  zero(3, (std::size_t(3) << 20) + 7);                          // large and odd: in pieces, the last one short
  zero((std::size_t(4) << 20) + 1, 100);                        // small
  zero(kBytes - (std::size_t(1) << 20), std::size_t(1) << 20);  // exactly the threshold, at the end
  EXPECT_EQ(memory, expected);
  std::fill(memory.begin(), memory.end(), 0xab);
  std::fill(expected.begin(), expected.end(), 0xab);
#pragma omp parallel for num_threads(2)
  for (int half = 0; half < 2; ++half) device->zero(memory.data() + half * (kBytes / 2) + 1, kBytes / 2 - 2);
  for (int half = 0; half < 2; ++half)
    std::fill_n(expected.begin() + half * std::ptrdiff_t(kBytes / 2) + 1, kBytes / 2 - 2, 0);
  EXPECT_EQ(memory, expected);
}

using MemoryLayout = test::BackendTest<>;

TEST_P(MemoryLayout, ArenaOffsetsAreAlignedAndPacked) {
  ActivationArena arena;
  const auto a = arena.add("a", 3, 4);      // 12 bytes at 0
  const auto b = arena.add("b", 100, 2);    // 200 bytes at 256
  const auto c = arena.add("c", 64, 4);     // exactly 256 bytes at 512
  const auto d = arena.add("d", 1, 8);      // 8 bytes at 768: bytes() = 776
  EXPECT_EQ((std::vector{a, b, c, d}), (std::vector<ActivationArena::Id>{0, 1, 2, 3}));
  const std::vector<std::size_t> offsets{0, 256, 512, 768};
  for (std::size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(arena.table()[i].offset, offsets[i]) << i;
  EXPECT_EQ(arena.table()[b].name, "b");
  EXPECT_EQ(arena.table()[b].bytes(), 200u);
  EXPECT_EQ(arena.bytes(), 776u);
  expect_packed(arena);

  arena.allocate(device());
  const auto* base = static_cast<const std::byte*>(arena.data(a));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % kAlign, 0u) << "the allocation itself is aligned";
  for (ActivationArena::Id id : {a, b, c, d}) {
    // One allocation at the table's offsets; under AddressSanitizer one aligned allocation per tensor instead.
    if (kArenaTensorPerAllocation)
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena.data(id)) % kAlign, 0u) << id;
    else
      EXPECT_EQ(arena.data(id), base + arena.table()[id].offset) << id;
    EXPECT_EQ(arena.as<float>(id), static_cast<float*>(arena.data(id))) << id;
  }
  // Each tensor keeps what is written into it while the others are written: the memory behind the offsets does
  // not overlap either.
  for (ActivationArena::Id id : {a, b, c, d}) {
    const std::vector<std::uint8_t> fill(arena.table()[id].bytes(), std::uint8_t(id + 1));
    device().upload(arena.data(id), fill.data(), fill.size());
  }
  for (ActivationArena::Id id : {a, b, c, d}) {
    std::vector<std::uint8_t> back(arena.table()[id].bytes());
    device().download(back.data(), arena.data(id), back.size());
    EXPECT_EQ(back, std::vector<std::uint8_t>(back.size(), std::uint8_t(id + 1))) << arena.table()[id].name;
  }
}

// The memory estimate computes the arena's size from the configuration before anything is allocated
// (model/activation_memory.hpp): it must be the size Gpt's table comes to, to the byte, for odd shapes (tensors
// not a multiple of the alignment) and several window counts.
TEST_P(MemoryLayout, ArenaBytesFromTheConfigurationEqualGptsTable) {
  struct Shape { int vocab, seq, layers, width, heads; std::size_t windows; };
  for (const Shape s : {Shape{11, 5, 2, 8, 2, 3}, Shape{256, 16, 1, 32, 4, 1}, Shape{50, 7, 3, 12, 3, 5}}) {
    ModelConfig config;
    config.vocab = s.vocab, config.seq = s.seq, config.layers = s.layers, config.width = s.width,
    config.heads = s.heads;
    const ParameterLayout layout(config);
    const Gpt gpt(layout, *be, s.windows);
    // What attention keeps per window and head: the [T,T] probabilities, or a fused attention's [T] fp32 row
    // statistics.
    const std::size_t T = std::size_t(s.seq);
    const std::size_t saved = be->attention_saved_bytes(T, std::size_t(s.width), std::size_t(s.heads));
    EXPECT_EQ(saved, be->attention_name().starts_with("gemm") ? T * T * element_size(act()) : T * sizeof(float))
        << be->attention_name();
    EXPECT_EQ(activation_arena_bytes(config, double(s.windows), double(element_size(act())),
                                     double(element_size(be->gradient_dtype())), double(saved)),
              double(gpt.activation_bytes()))
        << describe(config) << ", " << s.windows << " windows";
  }
}

TEST_P(MemoryLayout, GptActivationTableNamesEveryTensorOfALayer) {
  ModelConfig config;
  config.vocab = 11, config.seq = 5, config.layers = 2, config.width = 8, config.heads = 2;
  const ParameterLayout layout(config);
  const std::size_t windows = 3;
  const Gpt gpt(layout, *be, windows);
  EXPECT_EQ(gpt.max_windows(), windows);

  std::map<std::string, TensorSpec> table;
  for (const TensorSpec& t : gpt.activations().table())
    EXPECT_TRUE(table.emplace(t.name, t).second) << t.name << " twice in the table";
  const std::size_t N = windows * 5, C = 8, A = element_size(act()), F = sizeof(float);
  auto expect = [&](const std::string& name, std::size_t count, std::size_t element_bytes) {
    const auto it = table.find(name);
    ASSERT_NE(it, table.end()) << name << " is not in the table";
    EXPECT_EQ(it->second.count, count) << name;
    EXPECT_EQ(it->second.element_bytes, element_bytes) << name;
  };
  for (int l = 0; l < config.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    expect(h + "ln1", N * C, A);
    expect(h + "ln1_mean", N, F);
    expect(h + "ln1_rstd", N, F);
    expect(h + "qkv", N * 3 * C, A);
    // [B, NH, T, T] activations, or a fused attention's [B, NH, T] fp32 statistics, counted in bytes
    expect(h + "att_saved", windows * 2 * (be->attention_name().starts_with("gemm") ? 5 * 5 * A : 5 * F), 1);
    expect(h + "atty", N * C, A);
    expect(h + "res2", N * C, A);
    expect(h + "ln2", N * C, A);
    expect(h + "ln2_mean", N, F);
    expect(h + "ln2_rstd", N, F);
    expect(h + "fch", N * 4 * C, A);
    expect(h + "fch_gelu", N * 4 * C, A);
    expect(h + "out", N * C, A);
  }
  expect("inputs", N, sizeof(std::int32_t));
  expect("targets", N, sizeof(std::int32_t));
  expect("embedded", N * C, A);
  expect("lnf", N * C, A);
  expect("logits", N * 64, A);  // V = 11 in rows padded to 64 (ModelConfig::logits_row_length)
  expect("losses", N, F);
  EXPECT_EQ(table.count("h.2.ln1"), 0u) << "a layer the model does not have";
  EXPECT_EQ(gpt.activation_bytes(), gpt.activations().bytes());
  expect_packed(gpt.activations());
}

class WeightViews : public test::BackendTest<> {
 protected:
  static constexpr std::size_t n = 1000;
  std::mt19937 rng{11};
  std::vector<bf16> host = test::to_bf16(test::uniform(rng, n, -2, 2));
  test::DeviceVector<bf16> bf16_weights{device(), host};

  // The first `count` elements of a view, in fp32 on the host.
  std::vector<float> read(const void* view, std::size_t count) {
    test::DeviceArray copy(device(), wt(), count);
    device().copy(copy.data(), view, count * element_size(wt()));
    return copy.download();
  }
};

TEST_P(WeightViews, HoldTheBf16WeightsExactly) {
  be->reserve_weight_views(n, 2);
  const void* whole = be->acquire_weights(bf16_weights.data(), n);
  const void* half = be->acquire_weights(bf16_weights.data() + n / 2, n / 2);
  const auto expected = test::to_float(host);
  EXPECT_EQ(read(whole, n), expected);
  EXPECT_EQ(read(half, n / 2), std::vector<float>(expected.begin() + n / 2, expected.end()));
  if (be->name() == "cpu") {
    // The cpu backend multiplies fp32: its views are fp32 copies, one mirror of n elements per reserved view.
    EXPECT_EQ(wt(), DType::f32);
    EXPECT_NE(whole, static_cast<const void*>(bf16_weights.data()));
    EXPECT_EQ(be->weight_view_bytes(), 2 * n * sizeof(float));
  }
  be->release_weights(half);
  be->release_weights(whole);
}

TEST_P(WeightViews, AcquiringMoreViewsThanReservedThrows) {
  be->reserve_weight_views(n, 2);
  const void* first = be->acquire_weights(bf16_weights.data(), n);
  const void* second = be->acquire_weights(bf16_weights.data(), n);
  EXPECT_THROW(be->acquire_weights(bf16_weights.data(), n), std::exception);
  be->release_weights(first);  // a released view can be acquired again
  const void* third = be->acquire_weights(bf16_weights.data(), n);
  be->release_weights(second);
  be->release_weights(third);
}

TEST_P(WeightViews, ReleaseOfAPointerItDidNotHandOutThrows) {
  be->reserve_weight_views(n, 1);
  EXPECT_THROW(be->release_weights(bf16_weights.data() + 1), std::exception);
  const float stack = 0.0f;
  EXPECT_THROW(be->release_weights(&stack), std::exception);
}

TEST_P(WeightViews, TheModelThroughAViewSeesTheBf16Weights) {
  // The production path: BF16 weights on the device, one view of the whole flat buffer, whole_weights over it.
  // It must compute the same as the BF16-rounded values uploaded directly as compute weights.
  SKIP_UNLESS(skip_unless_repeatable());
  ModelConfig config;
  config.vocab = 13, config.seq = 4, config.layers = 1, config.width = 8, config.heads = 2;
  const ParameterLayout layout(config);
  std::vector<float> master(layout.total());
  initialise_parameters(layout, 5, master.data());
  const auto rounded = test::representable(DType::bf16, master);
  const test::DeviceVector<bf16> weights(device(), test::to_bf16(rounded));
  const std::vector<std::int32_t> windows{1, 5, 12, 0, 7, 3, 3, 9, 2, 11};
  Gpt gpt(layout, *be, 2);
  auto loss_and_gradient = [&](const WeightAccess& access) {
    test::DeviceScalar loss(device());
    auto grads = gradients(std::vector(layout.total(), 0.0f));
    gpt.forward(windows.data(), 2, access, loss.data(), 1.0f);
    gpt.backward(access, grads.data());
    return std::pair(loss.value(), grads.download());
  };
  be->reserve_weight_views(layout.total(), 1);
  const void* view = be->acquire_weights(weights.data(), layout.total());
  const auto through_view = loss_and_gradient(whole_weights(view, wt()));
  be->release_weights(view);
  const auto direct_weights = compute_weights(rounded);
  EXPECT_EQ(loss_and_gradient(whole_weights(direct_weights.data(), wt())), through_view);
}

TEST_P(WeightViews, ScratchIsReservedWhenTheModelIsLaidOutAndNeverGrows) {
  // No allocation in the step: the backend's scratch has its size once the model exists, and a forward and
  // backward over the most windows (and over fewer) leave it as it was.
  ModelConfig config;
  config.vocab = 13, config.seq = 6, config.layers = 2, config.width = 16, config.heads = 2;
  const ParameterLayout layout(config);
  std::vector<float> master(layout.total());
  initialise_parameters(layout, 9, master.data());
  const auto w = compute_weights(test::representable(DType::bf16, master));
  Gpt gpt(layout, *be, 3);
  const std::size_t reserved = be->scratch_bytes();
  std::vector<std::int32_t> windows(3 * 7);
  for (std::size_t i = 0; i < windows.size(); ++i) windows[i] = std::int32_t(i * 5 % 13);
  for (std::size_t n : {std::size_t(3), std::size_t(1)}) {
    test::DeviceScalar loss(device());
    auto grads = gradients(std::vector(layout.total(), 0.0f));
    gpt.forward(windows.data(), n, whole_weights(w.data(), wt()), loss.data(), 1.0f);
    gpt.backward(whole_weights(w.data(), wt()), grads.data());
    device().synchronize();
    EXPECT_EQ(be->scratch_bytes(), reserved) << n << " window(s)";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MemoryLayout, ::testing::ValuesIn(test::backends_under_test()),
                         test::TestName());
INSTANTIATE_TEST_SUITE_P(Backends, WeightViews, ::testing::ValuesIn(test::backends_under_test()),
                         test::TestName());

}  // namespace
}  // namespace dptrain
