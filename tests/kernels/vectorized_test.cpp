// The memory-bound kernels' two paths (kernels/vectorized.cuh: elementwise.cu, AdamW, attention's permutes, the
// embedding's forward): with
// every array 16-byte aligned they move kVector elements per 16-byte access, with any array off a 16-byte boundary
// one element at a time. Each kernel must give the same bits on both, at lengths around a vector (1, 7, 8, 9, …: the
// tail after the last whole vector), and take the wide path exactly when it may: the harness counts every 16-byte
// access and fails a launch with one at an address a GPU would fault on. What the kernels compute is tested against
// the cpu backend elsewhere (kernels_test, elementwise_test, optimizer_test); here the aligned run is the reference
// of the unaligned ones.
// clang-format off
#include "cuda_on_cpu.hpp"  // first: what the kernel files below need of CUDA
// clang-format on

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "../../kernels/attention.cu"
#include "../../kernels/elementwise.cu"
#include "../../kernels/encoder.cu"
#include "../../kernels/optimizer.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

std::size_t vector_accesses() { return cuda_on_cpu::vector_accesses.load(); }

template <typename Out>
struct Result {
  std::vector<Out> out;
  std::size_t accesses;  // 16-byte accesses the launch made
};

// kernel(out, in..., n) as the backend launches it, with out and each input `shifts` elements off a boundary.
template <typename Kernel, typename Out, typename... In>
Result<Out> run_placed(Kernel kernel, const std::array<unsigned, 1 + sizeof...(In)>& shifts,
                       const std::vector<Out>& out0, const std::vector<In>&... in) {
  const std::size_t n = out0.size();
  Placed<Out> out(out0, shifts[0]);
  auto place = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple<Placed<In>...>{Placed<In>(in, shifts[1 + I])...};
  };
  std::tuple<Placed<In>...> inputs = place(std::index_sequence_for<In...>{});
  const std::size_t before = vector_accesses();
  std::apply(
      [&](auto&... p) {
        cuda_on_cpu::launch(kernel, kernels::vectorized_launch(n), out.data, static_cast<const In*>(p.data)..., n);
      },
      inputs);
  return {out.values(), vector_accesses() - before};
}

template <typename T>
std::vector<std::uint32_t> bit_patterns(const std::vector<T>& v) {
  std::vector<std::uint32_t> u(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, bf16>) {
      u[i] = v[i].bits;
    } else {
      u[i] = bits(v[i]);
    }
  }
  return u;
}

#ifndef DPTRAIN_CUDA_ON_CPU_THREADS
constexpr std::size_t kLengths[] = {1, 7, 8, 9, 63, 64, 65, 1003, 4101};
constexpr unsigned kShifts[] = {1, 3, 7};
#else  // a thread per GPU thread under ThreadSanitizer: ~0.4 s a launch, so the cases that reach every path only
constexpr std::size_t kLengths[] = {9, 1003};
constexpr unsigned kShifts[] = {3};
#endif

// The kernel at every length: aligned (exactly `per_vector` 16-byte accesses per whole vector of kVector elements),
// and with each array in turn 1, 3 or 7 elements off (no 16-byte access, the same bits).
template <typename Kernel, typename Make>
void expect_paths_agree(Kernel kernel, std::size_t per_vector, Make make) {
  for (const std::size_t n : kLengths) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto made = make(n);
    const auto& out0 = made.first;
    const auto& inputs = made.second;
    constexpr std::size_t arrays = 1 + std::tuple_size_v<std::decay_t<decltype(inputs)>>;
    auto run = [&](const std::array<unsigned, arrays>& shifts) {
      return std::apply([&](const auto&... in) { return run_placed(kernel, shifts, out0, in...); }, inputs);
    };
    const auto aligned = run({});
    EXPECT_EQ(aligned.accesses, n / kernels::kVector * per_vector);
    for (std::size_t which = 0; which < arrays; ++which)
      for (const unsigned shift : kShifts) {
        std::array<unsigned, arrays> shifts{};
        shifts[which] = shift;
        const auto off = run(shifts);
        EXPECT_EQ(off.accesses, 0u) << "array " << which << " shifted by " << shift;
        ASSERT_EQ(bit_patterns(off.out), bit_patterns(aligned.out)) << "array " << which << " shifted by " << shift;
      }
  }
}

// A kernel over BF16 arrays only, launched by `call` on the arrays placed as it is given them: the same bits in
// every array with all of them aligned (`accesses` 16-byte accesses) and with each in turn 1, 3 or 7 elements off
// (none).
template <typename Call>
void expect_bf16_paths_agree(const std::vector<std::vector<bf16>>& start, std::size_t accesses, Call call) {
  auto run = [&](std::size_t which, unsigned shift) {
    std::vector<Placed<bf16>> arrays;
    arrays.reserve(start.size());
    for (std::size_t a = 0; a < start.size(); ++a) arrays.emplace_back(start[a], a == which ? shift : 0);
    const std::size_t before = vector_accesses();
    call(arrays);
    std::vector<std::vector<std::uint32_t>> after;
    for (const Placed<bf16>& a : arrays) after.push_back(bit_patterns(a.values()));
    return std::pair(after, vector_accesses() - before);
  };
  const auto aligned = run(0, 0);
  EXPECT_EQ(aligned.second, accesses);
  for (std::size_t which = 0; which < start.size(); ++which)
    for (const unsigned shift : kShifts) {
      const auto off = run(which, shift);
      EXPECT_EQ(off.second, 0u) << "array " << which << " shifted by " << shift;
      ASSERT_EQ(off.first, aligned.first) << "array " << which << " shifted by " << shift;
    }
}

class Vectorized : public KernelTest {};

__global__ void load_eight(float* sum, const bf16* p) {
  const kernels::Lanes<bf16, 8> x = kernels::load_lanes<8>(p);
  float s = 0;
  for (const bf16 v : x.at) s += kernels::to_f32(v);
  if (threadIdx.x == 0) *sum = s;
}

TEST_F(Vectorized, TheHarnessFailsAMisalignedSixteenByteAccess) {
  const std::vector<bf16> values = random_quarters_bf16(rng, 16);
  const Placed<bf16> placed(values, 0);
  float sum = 0;
  const std::size_t before = vector_accesses();
  cuda_on_cpu::launch(load_eight, dim3(1), dim3(32), &sum, static_cast<const bf16*>(placed.data));
  EXPECT_EQ(vector_accesses() - before, 32u);  // one per thread
  float expected = 0;
  for (int i = 0; i < 8; ++i) expected += to_float(values[i]);
  EXPECT_EQ(sum, expected);
  EXPECT_THROW(cuda_on_cpu::launch(load_eight, dim3(1), dim3(32), &sum, static_cast<const bf16*>(placed.data + 1)),
               std::logic_error);
  // The failure is the launch's alone: the next aligned one runs.
  cuda_on_cpu::launch(load_eight, dim3(1), dim3(32), &sum, static_cast<const bf16*>(placed.data + 8));
}

TEST_F(Vectorized, ElementwiseKernelsGiveTheSameBitsOnBothPaths) {
  auto bf16s = [&](std::size_t n) { return random_bf16(rng, n, -4, 4); };
  auto f32s = [&](std::size_t n) { return random_f32(rng, n, -4, 4); };
  // Per whole vector: a BF16 array is one 16-byte access, an fp32 one two; in-place kernels read and write `out`.
  {
    SCOPED_TRACE("gelu_forward");
    expect_paths_agree(kernels::gelu_forward, 2, [&](std::size_t n) {
      return std::pair(std::vector<bf16>(n, to_bf16(NAN)), std::tuple(bf16s(n)));
    });
  }
  {
    SCOPED_TRACE("gelu_backward");
    expect_paths_agree(kernels::gelu_backward, 3, [&](std::size_t n) {
      return std::pair(std::vector<bf16>(n, to_bf16(NAN)), std::tuple(bf16s(n), bf16s(n)));
    });
  }
  {
    SCOPED_TRACE("reduce_add_bf16");
    expect_paths_agree(kernels::reduce_add_bf16, 3,
                       [&](std::size_t n) { return std::pair(bf16s(n), std::tuple(bf16s(n))); });
  }
  {
    SCOPED_TRACE("add_f32");
    expect_paths_agree(kernels::add_f32, 6, [&](std::size_t n) { return std::pair(f32s(n), std::tuple(f32s(n))); });
  }
  {
    SCOPED_TRACE("cast_f32_to_bf16");
    expect_paths_agree(kernels::cast_f32_to_bf16, 3, [&](std::size_t n) {
      return std::pair(std::vector<bf16>(n, to_bf16(NAN)), std::tuple(f32s(n)));
    });
  }
  {
    SCOPED_TRACE("cast_bf16_to_f32");
    expect_paths_agree(kernels::cast_bf16_to_f32, 3,
                       [&](std::size_t n) { return std::pair(std::vector<float>(n, NAN), std::tuple(bf16s(n))); });
  }
}

// AdamW's five arrays (master, m, v, weights; the gradient in fp32 or BF16), each in turn off a boundary.
TEST_F(Vectorized, AdamWGivesTheSameBitsOnBothPaths) {
  const kernels::AdamWScalars s = kernels::adamw_scalars(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
  for (const std::size_t n : kLengths) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const std::vector<float> master = random_f32(rng, n, -1, 1), m = random_f32(rng, n, -1e-2f, 1e-2f),
                             v = random_f32(rng, n, 0, 1e-4f), gf = random_f32(rng, n, -0.1f, 0.1f);
    const std::vector<bf16> weights(n, to_bf16(NAN)), gb = random_bf16(rng, n, -0.1f, 0.1f);
    for (const bool bf16_grad : {false, true}) {
      SCOPED_TRACE(bf16_grad ? "bf16 gradient" : "fp32 gradient");
      auto run = [&](const std::array<unsigned, 5>& shift) {
        Placed<float> pm(master, shift[0]), pmm(m, shift[1]), pv(v, shift[2]);
        Placed<bf16> pw(weights, shift[3]);
        const std::size_t before = vector_accesses();
        if (bf16_grad) {
          const Placed<bf16> g(gb, shift[4]);
          cuda_on_cpu::launch(kernels::adamw_bf16_grad, kernels::adamw_launch(n), pm.data, pmm.data, pv.data, pw.data,
                              static_cast<const bf16*>(g.data), n, s);
        } else {
          const Placed<float> g(gf, shift[4]);
          cuda_on_cpu::launch(kernels::adamw_f32_grad, kernels::adamw_launch(n), pm.data, pmm.data, pv.data, pw.data,
                              static_cast<const float*>(g.data), n, s);
        }
        return std::tuple(bit_patterns(pm.values()), bit_patterns(pmm.values()), bit_patterns(pv.values()),
                          bit_patterns(pw.values()), vector_accesses() - before);
      };
      const auto aligned = run({});
      // master, m and v read and written (2 accesses each way), weights written (1), the gradient read (1 or 2).
      EXPECT_EQ(std::get<4>(aligned), n / kernels::kVector * (12 + 1 + (bf16_grad ? 1 : 2)));
      for (std::size_t which = 0; which < 5; ++which) {
        std::array<unsigned, 5> shift{};
        shift[which] = kShifts[0];
        const auto off = run(shift);
        EXPECT_EQ(std::get<4>(off), 0u) << "array " << which;
        EXPECT_EQ(std::get<0>(off), std::get<0>(aligned)) << "master, array " << which << " off";
        EXPECT_EQ(std::get<1>(off), std::get<1>(aligned)) << "m, array " << which << " off";
        EXPECT_EQ(std::get<2>(off), std::get<2>(aligned)) << "v, array " << which << " off";
        EXPECT_EQ(std::get<3>(off), std::get<3>(aligned)) << "weights, array " << which << " off";
      }
    }
  }
}

// Attention's permutes copy runs of hs channels: 16-byte accesses where hs and C are multiples of kVector and every
// array is aligned, one element at a time otherwise (C = 48 with hs = 12 below: never wide).
TEST_F(Vectorized, AttentionPermutesGiveTheSameBitsOnBothPaths) {
  struct Shape {
    std::size_t B, T, C, NH;
  };
#ifndef DPTRAIN_CUDA_ON_CPU_THREADS
  const Shape shapes[] = {{2, 5, 64, 2}, {1, 3, 48, 3}, {2, 3, 24, 3}, {1, 2, 48, 4}};
#else
  const Shape shapes[] = {{2, 5, 64, 2}, {1, 2, 48, 4}};
#endif
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
    const std::size_t n = s.B * s.T * s.C, vectors = (s.C / s.NH) % kernels::kVector == 0 ? n / kernels::kVector : 0;
    const kernels::Launch launch = kernels::attention_permute_launch(s.B, s.T, s.C);
    const std::vector<bf16> poison(n, to_bf16(NAN)), poison3(3 * n, to_bf16(NAN));
    // Each kernel with its arrays (as it takes them), their starting values, and its 16-byte accesses per vector.
    auto check = [&](const char* name, const std::vector<std::vector<bf16>>& start, std::size_t per_vector,
                     auto call) {
      SCOPED_TRACE(name);
      expect_bf16_paths_agree(start, vectors * per_vector, call);
    };
    auto bf16s = [&](std::size_t count) { return random_bf16(rng, count, -4, 4); };
    check("permute_qkv", {poison, poison, poison, bf16s(3 * n)}, 6, [&](std::vector<Placed<bf16>>& a) {
      cuda_on_cpu::launch(kernels::permute_qkv, launch, a[0].data, a[1].data, a[2].data,
                          static_cast<const bf16*>(a[3].data), s.B, s.T, s.C, s.NH);
    });
    check("unpermute", {poison, bf16s(n)}, 2, [&](std::vector<Placed<bf16>>& a) {
      cuda_on_cpu::launch(kernels::unpermute, launch, a[0].data, static_cast<const bf16*>(a[1].data), s.B, s.T, s.C,
                          s.NH);
    });
    check("permute_heads", {poison, bf16s(n)}, 2, [&](std::vector<Placed<bf16>>& a) {
      cuda_on_cpu::launch(kernels::permute_heads, launch, a[0].data, static_cast<const bf16*>(a[1].data), s.B, s.T,
                          s.C, s.NH);
    });
    check("unpermute_qkv", {poison3, bf16s(n), bf16s(n), bf16s(n)}, 6, [&](std::vector<Placed<bf16>>& a) {
      cuda_on_cpu::launch(kernels::unpermute_qkv, launch, a[0].data, static_cast<const bf16*>(a[1].data),
                          static_cast<const bf16*>(a[2].data), static_cast<const bf16*>(a[3].data), s.B, s.T, s.C,
                          s.NH);
    });
  }
}

// The embedding's forward adds rows of C channels: 16-byte runs where C is a multiple of kVector (C = 20: never).
TEST_F(Vectorized, EmbeddingForwardGivesTheSameBitsOnBothPaths) {
  struct Shape {
    std::size_t N, T, C, V;
  };
  for (const Shape& s : {Shape{10, 4, 24, 7}, Shape{6, 3, 20, 5}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " T " << s.T << " C " << s.C << " V " << s.V);
    std::vector<std::int32_t> tokens(s.N);
    for (std::int32_t& t : tokens) t = std::uniform_int_distribution<std::int32_t>(0, std::int32_t(s.V) - 1)(rng);
    const std::vector<bf16> wte = random_bf16(rng, s.V * s.C, -1, 1), wpe = random_bf16(rng, s.T * s.C, -1, 1);
    const std::size_t vectors = s.C % kernels::kVector == 0 ? s.N * s.C / kernels::kVector : 0;
    // Two rows read, one written per vector.
    expect_bf16_paths_agree(
        {std::vector<bf16>(s.N * s.C, to_bf16(NAN)), wte, wpe}, vectors * 3, [&](std::vector<Placed<bf16>>& a) {
          cuda_on_cpu::launch(kernels::embedding_forward, kernels::embedding_forward_launch(s.N, s.C), a[0].data,
                              static_cast<const std::int32_t*>(tokens.data()), static_cast<const bf16*>(a[1].data),
                              static_cast<const bf16*>(a[2].data), s.N, s.T, s.C);
        });
  }
}

}  // namespace
}  // namespace dptrain
