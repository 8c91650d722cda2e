// /proc/cpuinfo → the model and the vector extensions printed beside every cpu figure.
#include "dptrain/core/cpu_info.hpp"

#include <gtest/gtest.h>

namespace dptrain {
namespace {

// Two processors as Linux lists them (abridged flags); only the first is read.
constexpr std::string_view kTwoProcessors =
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "model name\t: AMD EPYC 9654 96-Core Processor\n"
    "flags\t\t: fpu vme sse sse2 ssse3 fma cx16 avx f16c avx2 bmi2 avx512f avx512dq avx512_bf16 avx512_vnni "
    "sha_ni\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: Other\n"
    "flags\t\t: fpu avx\n";

TEST(CpuInfo, ModelAndVectorExtensionsOfTheFirstProcessorInListedOrder) {
  const CpuInfo info = parse_cpuinfo(kTwoProcessors);
  EXPECT_EQ(info.model, "AMD EPYC 9654 96-Core Processor");
  EXPECT_EQ(info.vector_extensions,
            (std::vector<std::string>{"fma", "avx", "avx2", "avx512f", "avx512dq", "avx512_bf16", "avx512_vnni"}));
  EXPECT_EQ(info.description(),
            "AMD EPYC 9654 96-Core Processor (fma avx avx2 avx512f avx512dq avx512_bf16 avx512_vnni)");
}

TEST(CpuInfo, AmxCountsAndMissingFieldsGiveUnknownAndNone) {
  const CpuInfo amx = parse_cpuinfo("model name : Intel Xeon\nflags : avx2 amx_bf16 amx_tile sse4_2\n");
  EXPECT_EQ(amx.vector_extensions, (std::vector<std::string>{"avx2", "amx_bf16", "amx_tile"}));
  const CpuInfo empty = parse_cpuinfo("");
  EXPECT_EQ(empty.model, "unknown");
  EXPECT_TRUE(empty.vector_extensions.empty());
  EXPECT_EQ(empty.description(), "unknown (no vector extensions)");
  // "flags" must be the field's whole name: "vmx flags" (a later field of recent kernels) is not it.
  EXPECT_TRUE(parse_cpuinfo("vmx flags\t: avx2\n").vector_extensions.empty());
}

}  // namespace
}  // namespace dptrain
