// The BF16 backend on the CPU harness and a BLAS replay of its GEMM plans.
#include <cblas.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_on_cpu.hpp"
#include "dptrain/core/bf16.hpp"

// A build with CUDA links the same kernels, compiled by nvcc, into the compute library: here they are compiled for
// the harness under another namespace name, so the two sets of symbols do not collide.
#define kernels kernels_on_cpu
#include "../../kernels/attention.cu"
#include "../../kernels/classifier.cu"
#include "../../kernels/elementwise.cu"
#include "../../kernels/encoder.cu"
#include "../../kernels/layernorm.cu"
#include "../../kernels/optimizer.cu"
#include "../../kernels/reductions.cu"
#include "../../src/compute/bf16/bf16_backend.hpp"
#include "../../src/compute/bf16/kernel_calls.hpp"
#include "cuda_on_cpu_backend.hpp"

namespace dptrain::test {

namespace {

struct HarnessLauncher {
  template <typename Kernel, typename... Args>
  void operator()(const char* /*operation*/, const kernels::Launch& l, Kernel kernel, Args... args) const {
    enqueue([=] { cuda_on_cpu::launch(kernel, l, args...); });
  }
  Enqueue enqueue;
};

// The elements of a column-major rows×cols matrix with leading dimension ld span ld·(cols − 1) + rows.
std::size_t span(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return std::size_t(ld * (cols - 1) + rows);
}

std::vector<float> widen(const void* data, std::size_t n, DType dtype) {
  std::vector<float> out(n);
  if (dtype == DType::f32) {
    std::copy_n(static_cast<const float*>(data), n, out.data());
  } else {
    to_float(static_cast<const bf16*>(data), out.data(), n);
  }
  return out;
}

// Each batch member: A and B widened from BF16 (exactly), D computed by sgemm in fp32 onto C (D itself, or the
// residual) (plus the bias, then the
// activation: GELU with its input stored in pre, or the GELU gradient at pre), then stored in D's type — one
// rounding where D is BF16, as cuBLASLt's fp32-compute GEMM stores it.
class BlasGemm final : public GemmRunner {
 public:
  explicit BlasGemm(Enqueue enqueue, bool refuse_ragged_activations = false)
      : enqueue_(std::move(enqueue)), refuse_ragged_activations_(refuse_ragged_activations) {}
  // OpenBLAS packs the operands into blocks before it multiplies: the order of the additions follows the dimensions
  // alone.
  bool row_length_invariant() const override { return true; }

 private:
  bool run_part(const GemmPlan& p, const void* a, const void* b, const void* c, void* d, DType d_type,
                const void* bias, const void* pre) override {
    if (refuse_ragged_activations_ && p.activation != GemmActivation::none && p.n % 8 != 0) return false;
    enqueue_([=] { replay(p, a, b, c, d, d_type, bias, const_cast<void*>(pre)); });
    return true;
  }

  static void replay(const GemmPlan& p, const void* a_data, const void* b_data, const void* c_data, void* d_data,
                     DType d_type, const void* bias, void* pre_data) {
    const auto* A = static_cast<const bf16*>(a_data);
    const auto* B = static_cast<const bf16*>(b_data);
    const auto* C = static_cast<const std::byte*>(c_data);
    auto* D = static_cast<std::byte*>(d_data);
    const bool ta = p.transa == GemmOp::T, tb = p.transb == GemmOp::T;
    const std::size_t a_span = span(ta ? p.k : p.m, ta ? p.m : p.k, p.lda);
    const std::size_t b_span = span(tb ? p.n : p.k, tb ? p.k : p.n, p.ldb), d_span = span(p.m, p.n, p.ldc);
    const std::vector<float> bias32 = bias ? widen(bias, std::size_t(p.m), DType::bf16) : std::vector<float>{};
    for (std::int64_t i = 0; i < p.batch; ++i) {
      const std::vector<float> a = widen(A + i * p.stride_a, a_span, DType::bf16);
      const std::vector<float> b = widen(B + i * p.stride_b, b_span, DType::bf16);
      std::byte* d_member = D + std::size_t(i * p.stride_c) * element_size(d_type);
      std::vector<float> d = widen(C + std::size_t(i * p.stride_c) * element_size(d_type), d_span, d_type);
      cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(p.m), int(p.n),
                  int(p.k), p.alpha, a.data(), int(p.lda), b.data(), int(p.ldb), p.beta, d.data(), int(p.ldc));
      for (std::int64_t col = 0; col < p.n && bias; ++col)
        for (std::int64_t row = 0; row < p.m; ++row) d[std::size_t(col * p.ldc + row)] += bias32[std::size_t(row)];
      if (p.activation != GemmActivation::none) activate(p, d, static_cast<bf16*>(pre_data));
      // Only the m×n elements: the gaps between columns (ldc > m) are not the GEMM's to write.
      for (std::int64_t col = 0; col < p.n; ++col) {
        const std::size_t at = std::size_t(col * p.ldc);
        if (d_type == DType::f32) {
          std::copy_n(d.data() + at, p.m, reinterpret_cast<float*>(d_member) + at);
        } else {
          to_bf16(d.data() + at, reinterpret_cast<bf16*>(d_member) + at, std::size_t(p.m));
        }
      }
    }
  }

  // The activation epilogue over D's m×n elements (the plan is not batched): GELU, pre ← bf16(x); or x·gelu'(pre).
  static void activate(const GemmPlan& p, std::vector<float>& d, bf16* pre) {
    for (std::int64_t col = 0; col < p.n; ++col)
      for (std::int64_t row = 0; row < p.m; ++row) {
        const std::size_t at = std::size_t(col * p.ldc + row);
        if (p.activation == GemmActivation::gelu) {
          pre[at] = to_bf16(d[at]);
          d[at] = kernels::gelu(d[at]);
        } else {
          d[at] *= kernels::gelu_derivative(to_float(pre[at]));
        }
      }
  }

  Enqueue enqueue_;
  bool refuse_ragged_activations_;
};

}  // namespace

std::unique_ptr<Backend> make_harness_backend(const std::string& name, std::unique_ptr<Device> device,
                                              const Enqueue& enqueue, bool fuse_epilogues) {
  return make_bf16_backend(name, std::move(device),
                           std::make_unique<KernelCalls<HarnessLauncher>>(HarnessLauncher{enqueue}),
                           std::make_unique<BlasGemm>(enqueue), nullptr, "gemm", fuse_epilogues);
}

std::unique_ptr<Backend> make_cuda_on_cpu_backend() {
  return make_harness_backend(kCudaOnCpu, make_cpu_device(), [](const std::function<void()>& work) { work(); });
}

std::unique_ptr<Backend> make_cuda_on_cpu_backend_refusing_epilogues() {
  const Enqueue at_once = [](const std::function<void()>& work) { work(); };
  return make_bf16_backend(kCudaOnCpuRefusingEpilogues, make_cpu_device(),
                           std::make_unique<KernelCalls<HarnessLauncher>>(HarnessLauncher{at_once}),
                           std::make_unique<BlasGemm>(at_once, true));
}

}  // namespace dptrain::test
