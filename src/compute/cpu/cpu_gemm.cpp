#include "dptrain/compute/cpu_gemm.hpp"

#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <ranges>

#ifdef DPTRAIN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "dptrain/compute/onednn_bf16_gemm.hpp"
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

std::vector<std::string> cpu_gemm_bf16_names() {
  if (onednn_bf16_unavailable().empty()) return {"onednn-bf16"};
  return {};
}

std::string_view gemm_case_name(GemmCase c) {
  switch (c) {
    case GemmCase::nt:
      return "nt";
    case GemmCase::nn:
      return "nn";
    case GemmCase::tn:
      return "tn";
  }
  return "?";
}

namespace {

// Why `library` cannot be used, as the whole --cpu-gemm value or (`kind` given) for one kind of product; empty if
// it can.
std::string library_unavailable(std::string_view library, std::string_view kind = {}) {
  std::vector<std::string> names = cpu_gemm_names();
  for (std::string& name : cpu_gemm_bf16_names()) names.push_back(std::move(name));
  if (std::find(names.begin(), names.end(), library) != names.end()) return "";
  if (library == "onednn-bf16") return onednn_bf16_unavailable();
  if (library == "onednn")
    return "--cpu-gemm onednn: this build has no oneDNN (apt-get install libdnnl-dev and build again); use "
           "--cpu-gemm openblas";
  // "by-cpu" and "auto" are resolved by the trainer (train/cpu_gemm_choice.hpp) into one of these or a mix: they
  // name no library of one kind.
  std::vector<std::string> accepted;
  if (kind.empty()) accepted = {"by-cpu", "auto"};
  accepted.insert(accepted.end(), names.begin(), names.end());
  const std::string last = accepted.back();
  accepted.pop_back();
  const std::string either = accepted.empty() ? last : fmt::format("{} or {}", fmt::join(accepted, ", "), last);
  if (!kind.empty())
    return fmt::format("--cpu-gemm: unknown library '{}' for {} (expected {})", library, kind, either);
  return fmt::format(
      "--cpu-gemm: unknown library '{}' (expected {}, or one per kind of product: nt=LIB,nn=LIB,tn=LIB)", library,
      either);
}

// The library per case that `spec` names (a library, or nt=…,nn=…,tn=…), or why it names none.
struct ParsedSpec {
  std::array<std::string, 3> libraries;
  std::string error;
};

ParsedSpec parse_spec(std::string_view spec) {
  ParsedSpec parsed;
  if (spec.find('=') == std::string_view::npos) {
    parsed.libraries.fill(std::string(spec));
    parsed.error = library_unavailable(spec);
    return parsed;
  }
  const std::string usage =
      fmt::format("--cpu-gemm '{}': name a library for each kind of product once, as nt=LIB,nn=LIB,tn=LIB", spec);
  std::array<bool, 3> seen{};
  for (const auto part : std::views::split(spec, ',')) {
    const std::string_view item(part.begin(), part.end());
    const std::size_t equals = item.find('=');
    const auto named = std::find_if(kGemmCases.begin(), kGemmCases.end(),
                                    [&](GemmCase c) { return gemm_case_name(c) == item.substr(0, equals); });
    if (equals == std::string_view::npos || named == kGemmCases.end() || seen[std::size_t(*named)]) {
      parsed.error = usage;
      return parsed;
    }
    const std::string_view library = item.substr(equals + 1);
    if (parsed.error = library_unavailable(library, gemm_case_name(*named)); !parsed.error.empty()) return parsed;
    parsed.libraries[std::size_t(*named)] = std::string(library);
    seen[std::size_t(*named)] = true;
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) parsed.error = usage;
  return parsed;
}

SgemmFunction library_function(std::string_view library) {
#ifdef DPTRAIN_HAVE_ONEDNN
  if (library == "onednn") return onednn_sgemm;
  if (library == "onednn-bf16") return onednn_bf16_sgemm;
#endif
  DP_ASSERT(library == "openblas");
  return openblas_sgemm;
}

// The call taking B in BF16, for the library that multiplies BF16 operands; null for the fp32 ones.
Bf16BGemmFunction library_bf16_b_function([[maybe_unused]] std::string_view library) {
#ifdef DPTRAIN_HAVE_ONEDNN
  if (library == "onednn-bf16") return onednn_bf16_gemm_bf16_b;
#endif
  return nullptr;
}

}  // namespace

std::string cpu_gemm_unavailable(std::string_view spec) { return parse_spec(spec).error; }

std::string cpu_gemm_spec(const std::array<std::string, 3>& libraries) {
  if (libraries[1] == libraries[0] && libraries[2] == libraries[0]) return libraries[0];
  std::vector<std::string> items;
  for (GemmCase c : kGemmCases) items.push_back(fmt::format("{}={}", gemm_case_name(c), libraries[std::size_t(c)]));
  return fmt::format("{}", fmt::join(items, ","));
}

CpuGemm make_cpu_gemm(std::string_view spec) {
  const ParsedSpec parsed = parse_spec(spec);
  if (!parsed.error.empty()) throw UserError(parsed.error);
  CpuGemm gemm{.name = cpu_gemm_spec(parsed.libraries), .libraries = parsed.libraries, .functions = {}};
  for (std::size_t i = 0; i < 3; ++i) {
    gemm.functions[i] = library_function(parsed.libraries[i]);
    gemm.bf16_b_functions[i] = library_bf16_b_function(parsed.libraries[i]);
  }
#ifdef DPTRAIN_HAVE_ONEDNN
  if (gemm.name == "onednn-bf16") gemm.batched_bf16 = onednn_bf16_batched_gemm;
#endif
  return gemm;
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

namespace {

// What time_products holds, in floats: the weight operand (B of nt and nn) once, shared by the threads as the
// backend's weights are; per thread its weight-gradient block (C of tn); per thread and window the activations (A,
// and C of nt and nn or B of tn).
struct ProbeSizes {
  std::size_t weight = 0, block = 0, window = 0;
};

ProbeSizes probe_sizes(std::span<const GemmProduct> products) {
  ProbeSizes sizes;
  for (const GemmProduct& p : products) {
    const std::size_t a = std::size_t(p.m) * std::size_t(p.k), b = std::size_t(p.k) * std::size_t(p.n),
                      c = std::size_t(p.m) * std::size_t(p.n);
    if (p.gemm_case() == GemmCase::tn) {
      sizes.block = std::max(sizes.block, c);
      sizes.window = std::max(sizes.window, a + b);
    } else {
      sizes.weight = std::max(sizes.weight, b);
      sizes.window = std::max(sizes.window, a + c);
    }
  }
  return sizes;
}

}  // namespace

std::size_t probe_window_bytes(std::span<const GemmProduct> products) {
  return probe_sizes(products).window * sizeof(float);
}

double time_products(const CpuGemm& gemm, std::span<const GemmProduct> products, int threads, int windows,
                     int rounds) {
  const ProbeSizes sizes = probe_sizes(products);
  // Small values: no overflow, no subnormals over a few products.
  const std::vector<float> weight(std::max<std::size_t>(sizes.weight, 1), 1e-3f);
  std::vector<std::vector<float>> own(std::size_t(threads),
                                      std::vector<float>(sizes.block + std::size_t(windows) * sizes.window, 1e-3f));
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms the library's buffers and the caches
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      float* block = own[std::size_t(omp_get_thread_num())].data();
      for (const GemmProduct& p : products)
        for (int window = 0; window < windows; ++window) {
          float* a = block + sizes.block + std::size_t(window) * sizes.window;
          float* second = a + std::size_t(p.m) * std::size_t(p.k);  // B of tn, C of nt and nn
          const int lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
          if (p.gemm_case() == GemmCase::tn)
            gemm.sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a, lda, second, ldb, 1.0f, block, p.n);
          else
            gemm.sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a, lda, weight.data(), ldb, 0.0f, second, p.n);
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::min(best, seconds);
  }
  return best;
}

}  // namespace dptrain
