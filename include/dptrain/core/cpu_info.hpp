// The host CPU as /proc/cpuinfo describes it: the model and the vector extensions that decide which GEMM kernels
// can run (AVX, AVX2, FMA, AVX-512 and its BF16 instructions, AMX), printed beside every cpu figure: the same
// command is up to twice as fast on a CPU with AVX-512 (docs/cpu-speed.md).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dptrain {

struct CpuInfo {
  std::string model = "unknown";               // "model name", the first processor's
  std::vector<std::string> vector_extensions;  // flags: avx, avx2, fma, avx512*, amx* in the order listed

  // "AMD EPYC (avx avx2 fma)"; "(no vector extensions)" where none is listed.
  std::string description() const;
};

// What a /proc/cpuinfo text says about its first processor.
CpuInfo parse_cpuinfo(std::string_view text);
// This host's, from /proc/cpuinfo, or from the file the environment variable DPTRAIN_CPUINFO names (a text in
// /proc/cpuinfo's format: how a test stands for a host with another CPU); the model "unknown" and no extensions
// where it cannot be read.
CpuInfo host_cpu_info();

}  // namespace dptrain
