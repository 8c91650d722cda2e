#include "dptrain/compute/cpu_gemm.hpp"

#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

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
  return fmt::format("--cpu-gemm: unknown library '{}' (expected {})", name, fmt::join(names, " or "));
}

CpuGemm make_cpu_gemm(std::string_view name) {
  if (const std::string why = cpu_gemm_unavailable(name); !why.empty()) throw UserError(why);
#ifdef DPTRAIN_HAVE_ONEDNN
  if (name == "onednn") return {"onednn", onednn_sgemm};
#endif
  return {"openblas", openblas_sgemm};
}

}  // namespace dptrain
