// The cuda backend's code on the CPU: the BF16 backend (src/compute/bf16/) over the host device, the kernels of
// kernels/ run by the CPU harness with the launch shapes the backend uses on a GPU, and the GEMM plans replayed with
// cblas_sgemm on the BF16 operands (rounding D once, as cuBLASLt does). Everything of the cuda backend but the CUDA
// runtime and cuBLASLt themselves runs in CI this way, against the cpu backend.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/cpu_gemm.hpp"

namespace dptrain::test {

inline constexpr const char* kCudaOnCpu = "cuda_kernels_on_cpu";
std::unique_ptr<Backend> make_cuda_on_cpu_backend();
// The same with a GEMM replay that refuses, when called, every part with an activation epilogue whose n is not a
// multiple of 8 (as cuBLASLt may refuse a call): of a product of 9 rows the first 8 run fused, then the backend
// must compose the whole product.
inline constexpr const char* kCudaOnCpuRefusingEpilogues = "cuda_kernels_on_cpu_refusing_epilogues";
std::unique_ptr<Backend> make_cuda_on_cpu_backend_refusing_epilogues();

// Runs `work` where the backend's kernels run: at once, or queued on a stream.
using Enqueue = std::function<void(std::function<void()>)>;
// The same BF16 backend named `name` over another device, each kernel launch and GEMM replay handed to `enqueue`
// (the fake CUDA runtime's compute stream, tests/comm/nccl_on_cpu/: kernels then run in stream order, after the
// copies and events queued before them).
std::unique_ptr<Backend> make_harness_backend(const std::string& name, std::unique_ptr<Device> device,
                                              const Enqueue& enqueue, bool fuse_epilogues = true);

// The backends the suites run on: every backend of the factory, the cpu backend over oneDNN where built with it,
// and the cuda backend's code on the CPU, which runs wherever the tests do. A backend of the build that cannot run
// here (cuda without a GPU) is skipped by the tests with backend_under_test_unavailable()'s reason. The cpu backend
// over oneDNN's sgemm (--cpu-gemm onednn), where the build has it.
inline constexpr const char* kCpuOnednn = "cpu_onednn";
// The cuda backend told --attention gemm, where the build has cuDNN (its plain "cuda" then fuses attention where
// cuDNN takes the heads): the GEMM attention stays tested on a GPU beside the fused one.
inline constexpr const char* kCudaGemmAttention = "cuda_gemm_attention";

// The GPU backends under test: "cuda", and kCudaGemmAttention where the build has cuDNN.
inline std::vector<std::string> gpu_backends_under_test() {
#ifdef DPTRAIN_HAVE_CUDNN
  return {"cuda", kCudaGemmAttention};
#else
  return {"cuda"};
#endif
}

inline std::vector<std::string> backends_under_test() {
  std::vector<std::string> names = {"cpu"};
  for (const std::string& backend : backend_names())
    if (backend == "cuda")
      for (const std::string& gpu : gpu_backends_under_test()) names.push_back(gpu);
  for (const std::string& gemm : cpu_gemm_names())
    if (gemm == "onednn") names.push_back(kCpuOnednn);
  names.push_back(kCudaOnCpu);
  return names;
}
inline std::unique_ptr<Backend> make_backend_under_test(const std::string& name) {
  if (name == kCpuOnednn) return make_cpu_backend("onednn");
  if (name == kCudaGemmAttention) return make_backend("cuda", {}, nullptr, "gemm");
  if (name == kCudaOnCpuRefusingEpilogues) return make_cuda_on_cpu_backend_refusing_epilogues();
  return name == kCudaOnCpu ? make_cuda_on_cpu_backend() : make_backend(name);
}
inline std::string backend_under_test_unavailable(const std::string& name) {
  if (name == kCpuOnednn) return cpu_gemm_unavailable("onednn");
  if (name == kCudaGemmAttention) return backend_unavailable("cuda");
  return name == kCudaOnCpu || name == kCudaOnCpuRefusingEpilogues ? "" : backend_unavailable(name);
}

}  // namespace dptrain::test
