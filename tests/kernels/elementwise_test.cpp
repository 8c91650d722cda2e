// The fp32 accumulate and the casts of kernels/elementwise.cu on the CPU harness, bitwise against the cpu backend
// (accumulate, cast) and core/bf16.hpp's conversions: fp32 values on every special path of the rounding (NaNs
// with their sign and payload, ±∞, ±0, ties to even both ways, the carry into the exponent and into ∞,
// subnormals) and every BF16 value with a special exponent, besides random ones. The GELU and reduce-add kernels
// of the same file are tested in kernels_test.cpp.
#include "cuda_on_cpu.hpp"

#include "../../kernels/elementwise.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

class Elementwise : public KernelTest {};

TEST_F(Elementwise, AddF32IsBitwiseTheCpuAccumulate) {
  for (const std::size_t n : {std::size_t(1), std::size_t(255), std::size_t(1000)}) {
    const std::vector<float> out0 = random_f32(rng, n, -1, 1), a = random_f32(rng, n, -1e-3f, 1e-3f);
    std::vector<float> ref = out0, got = out0;
    cpu->accumulate(ref.data(), a.data(), n, DType::f32);
    cuda_on_cpu::launch(kernels::add_f32, kernels::vectorized_launch(n), got.data(), a.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[i]), bits(ref[i])) << "n " << n << " i " << i;
  }
}

TEST_F(Elementwise, CastF32ToBf16IsBitwiseCoreToBf16) {
  std::vector<std::uint32_t> patterns = {
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu,  // NaNs: quiet, signalling
      0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,                            // ±∞, ±0
      0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u,                            // ties: to even down, up
      0x3f808001u, 0x3f807fffu, 0x3fffffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,  // carries, into ∞
      0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x807fffffu, 0x00400000u,  // subnormals
      0x3f800000u, 0x42280000u, 0xc2f6e979u};
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 3000; ++i) patterns.push_back(any(rng));
  std::vector<float> in(patterns.size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = from_bits(patterns[i]);
  std::vector<bf16> got(in.size()), ref(in.size());
  cpu->cast(in.data(), DType::f32, ref.data(), DType::bf16, in.size());
  cuda_on_cpu::launch(kernels::cast_f32_to_bf16, kernels::vectorized_launch(in.size()), got.data(),
                      static_cast<const float*>(in.data()), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(got[i].bits, to_bf16(in[i]).bits) << std::hex << "fp32 bits 0x" << patterns[i];
    ASSERT_EQ(got[i].bits, ref[i].bits) << std::hex << "fp32 bits 0x" << patterns[i];
  }
}

TEST_F(Elementwise, CastBf16ToF32IsBitwiseCoreToFloat) {
  // Every value with the exponent all zeros or all ones (±0, subnormals, ±∞, NaNs with every payload), and random
  // others (the harness starts a thread per element: all 65,536 would take seconds).
  std::vector<bf16> in;
  for (std::uint32_t sign : {0u, 0x8000u})
    for (std::uint32_t exponent : {0u, 0x7f80u})
      for (std::uint32_t mantissa = 0; mantissa < 128; ++mantissa) in.push_back(bf16{std::uint16_t(sign | exponent | mantissa)});
  std::uniform_int_distribution<unsigned> any(0, 0xffff);
  while (in.size() < 2048) in.push_back(bf16{std::uint16_t(any(rng))});
  std::vector<float> got(in.size()), ref(in.size());
  cpu->cast(in.data(), DType::bf16, ref.data(), DType::f32, in.size());
  cuda_on_cpu::launch(kernels::cast_bf16_to_f32, kernels::vectorized_launch(in.size()), got.data(),
                      static_cast<const bf16*>(in.data()), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(bits(got[i]), bits(to_float(in[i]))) << std::hex << "bf16 bits 0x" << in[i].bits;
    ASSERT_EQ(bits(got[i]), bits(ref[i])) << std::hex << "bf16 bits 0x" << in[i].bits;
  }
}

}  // namespace
}  // namespace dptrain
