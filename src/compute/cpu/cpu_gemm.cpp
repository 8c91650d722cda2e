#include "dptrain/compute/cpu_gemm.hpp"

#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <limits>

#ifdef DPTRAIN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

void openblas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

#ifdef DPTRAIN_HAVE_ONEDNN
void onednn_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) fail("dnnl_sgemm({}, {}, {}) failed with status {}", m, n, k, int(status));
}
#endif

}  // namespace

std::vector<std::string> cpu_gemm_names() {
#ifdef DPTRAIN_HAVE_ONEDNN
  return {"openblas", "onednn"};
#else
  return {"openblas"};
#endif
}

std::string cpu_gemm_unavailable(std::string_view name) {
  const std::vector<std::string> names = cpu_gemm_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return "";
  if (name == "onednn")
    return "--cpu-gemm onednn: this build has no oneDNN (apt-get install libdnnl-dev and build again); use "
           "--cpu-gemm openblas";
  // "auto" is resolved by the trainer (train/cpu_gemm_choice.hpp) into one of these.
  std::vector<std::string> accepted = {"auto"};
  accepted.insert(accepted.end(), names.begin(), names.end());
  const std::string last = accepted.back();
  accepted.pop_back();
  return fmt::format("--cpu-gemm: unknown library '{}' (expected {} or {})", name, fmt::join(accepted, ", "), last);
}

CpuGemm make_cpu_gemm(std::string_view name) {
  if (const std::string why = cpu_gemm_unavailable(name); !why.empty()) throw UserError(why);
#ifdef DPTRAIN_HAVE_ONEDNN
  if (name == "onednn") return {"onednn", onednn_sgemm};
#endif
  return {"openblas", openblas_sgemm};
}

std::vector<GemmProduct> block_products(int rows, int C, int threads) {
  std::vector<GemmProduct> products;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
    products.push_back({false, true, rows, out, in});                            // out[rows,OC] = in[rows,C]·wᵀ
    products.push_back({false, false, rows, in, out});                           // din[rows,C] += dout[rows,OC]·w
    products.push_back({true, false, (out + threads - 1) / threads, in, rows});  // dw[OC/threads,C] += doutᵀ·in
  }
  return products;
}

double time_products(const CpuGemm& gemm, std::span<const GemmProduct> products, int threads, int rounds) {
  std::size_t a_size = 0, b_size = 0, c_size = 0;
  for (const GemmProduct& p : products) {
    a_size = std::max(a_size, std::size_t(p.m) * std::size_t(p.k));
    b_size = std::max(b_size, std::size_t(p.k) * std::size_t(p.n));
    c_size = std::max(c_size, std::size_t(p.m) * std::size_t(p.n));
  }
  // Each thread its own A, B, C (small values: no overflow, no subnormals over a few products).
  std::vector<std::vector<float>> operands(std::size_t(threads), std::vector<float>(a_size + b_size + c_size, 1e-3f));
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms the library's buffers and the caches
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      float* a = operands[std::size_t(omp_get_thread_num())].data();
      float* b = a + a_size;
      float* c = b + b_size;
      for (const GemmProduct& p : products)
        gemm.sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a, p.trans_a ? p.m : p.k, b, p.trans_b ? p.k : p.n,
                   0.0f, c, p.n);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::min(best, seconds);
  }
  return best;
}

}  // namespace dptrain
