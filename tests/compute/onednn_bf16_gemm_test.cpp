// --cpu-gemm onednn-bf16 (compute/onednn_bf16_gemm.hpp): each product is that of the operands rounded to BF16,
// accumulated in fp32. Against a double-precision product of the BF16-rounded operands the only error left is
// fp32 accumulation: k additions plus the alpha scaling and the beta sum, each within 2⁻²⁴ relative, so
// |C − reference| ≤ (k + 3)·2⁻²⁴·(|alpha|·Σ|a||b| + |beta·C₀|) (Higham's γₖ to first order). The same product in fp32
// (operands not rounded) misses that bound by ~2⁻⁹ relative per term, so the test sees the rounding happen.
// Where the CPU has no BF16 instructions the library is refused with one line, and that is what is tested there.
#include "dptrain/compute/onednn_bf16_gemm.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/cpu_info.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

struct Call {
  bool trans_a, trans_b;
  int m, n, k;
  int pad;  // extra columns of each stored matrix (leading dimension = columns + pad)
  float alpha, beta;
};

// A call's operands (stored transposed where trans_*), C₀, and its result by the library under test.
struct Product {
  Call call;
  int lda, ldb, ldc;
  std::vector<float> a, b, c0, c;
};

Product make_product(const Call& call, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  const auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = value(rng);
    return v;
  };
  Product p{.call = call,
            .lda = (call.trans_a ? call.m : call.k) + call.pad,
            .ldb = (call.trans_b ? call.k : call.n) + call.pad,
            .ldc = call.n + call.pad,
            .a = {},
            .b = {},
            .c0 = {},
            .c = {}};
  p.a = fill(std::size_t(call.trans_a ? call.k : call.m) * p.lda);
  p.b = fill(std::size_t(call.trans_b ? call.n : call.k) * p.ldb);
  p.c0 = fill(std::size_t(call.m) * p.ldc);
  p.c = p.c0;
  return p;
}

void run(Product& p) {
  const Call& c = p.call;
  onednn_bf16_sgemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, c.beta,
                    p.c.data(), p.ldc);
}

// The largest error of an element of C against the double product of the BF16-rounded operands, relative to
// the bound above (≤ 1 where within it everywhere).
double worst_error_over_bound(const Product& p) {
  const Call& c = p.call;
  double worst = 0.0;
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int l = 0; l < c.k; ++l) {
        const double a = round_to_bf16(c.trans_a ? p.a[std::size_t(l) * p.lda + i] : p.a[std::size_t(i) * p.lda + l]);
        const double b = round_to_bf16(c.trans_b ? p.b[std::size_t(j) * p.ldb + l] : p.b[std::size_t(l) * p.ldb + j]);
        sum += a * b;
        magnitude += std::abs(a * b);
      }
      const double c0 = p.c0[std::size_t(i) * p.ldc + j];
      const double reference = c.alpha * sum + c.beta * c0;
      const double bound = (c.k + 3) * std::ldexp(1.0, -24) * (std::abs(c.alpha) * magnitude + std::abs(c.beta * c0));
      worst = std::max(worst, std::abs(p.c[std::size_t(i) * p.ldc + j] - reference) / bound);
    }
  return worst;
}

// Within the bound, and the padding columns of C untouched.
void expect_within_bound(const Product& p, const std::string& what) {
  EXPECT_LE(worst_error_over_bound(p), 1.0) << what;
  for (int i = 0; i < p.call.m; ++i)
    for (int j = p.call.n; j < p.ldc; ++j)
      EXPECT_EQ(p.c[std::size_t(i) * p.ldc + j], p.c0[std::size_t(i) * p.ldc + j]) << what;
}

std::string describe(const Call& c) {
  return "m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
         (c.trans_a ? " Aᵀ" : "") + (c.trans_b ? " Bᵀ" : "");
}

// The backend's three kinds of call (forward nt, input gradient nn, weight gradient tn) at the small config's
// shapes and at awkward ones (one row, sizes no multiple of 16, padded leading dimensions), with attention's
// alpha and beta of 0, 1 and ½.
const std::vector<Call> kCalls = {
    {false, true, 128, 768, 256, 0, 1.0f, 0.0f},  {false, false, 128, 256, 768, 0, 1.0f, 1.0f},
    {true, false, 384, 256, 128, 0, 1.0f, 1.0f},  {false, true, 1, 17, 33, 3, 1.0f, 0.0f},
    {false, false, 7, 1, 65, 5, 0.125f, 0.5f},    {true, false, 33, 19, 1, 2, 1.0f, 1.0f},
    {false, true, 32, 128, 64, 64, 0.125f, 0.0f}, {true, true, 9, 11, 13, 1, -1.0f, 0.5f},
};

bool has_bf16_instructions(const CpuInfo& cpu) {
  const auto& x = cpu.vector_extensions;
  return std::find(x.begin(), x.end(), "avx512_bf16") != x.end() ||
         std::find(x.begin(), x.end(), "amx_bf16") != x.end();
}

TEST(OneDnnBf16Gemm, OfferedExactlyWhereTheCpuHasBf16InstructionsElseRefusedWithOneLine) {
  const std::string why = onednn_bf16_unavailable();
  const std::vector<std::string> offered = cpu_gemm_bf16_names();
  if (why.empty()) {
    EXPECT_EQ(offered, std::vector<std::string>{"onednn-bf16"});
    EXPECT_TRUE(has_bf16_instructions(host_cpu_info())) << host_cpu_info().description();
    EXPECT_EQ(make_cpu_gemm("onednn-bf16").name, "onednn-bf16");
    EXPECT_EQ(cpu_gemm_unavailable("nt=onednn-bf16,nn=openblas,tn=onednn-bf16"), "");
  } else {
    EXPECT_TRUE(offered.empty());
    EXPECT_EQ(why.rfind("--cpu-gemm onednn-bf16: ", 0), 0u) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    EXPECT_EQ(cpu_gemm_unavailable("onednn-bf16"), why);
    EXPECT_THROW(make_cpu_gemm("onednn-bf16"), UserError);
  }
  // auto chooses among the fp32 libraries only.
  const std::vector<std::string> fp32 = cpu_gemm_names();
  EXPECT_EQ(std::find(fp32.begin(), fp32.end(), "onednn-bf16"), fp32.end());
}

// Needs the BF16 instructions; where they are missing the test above checked the refusal instead.
class OneDnnBf16Products : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = onednn_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(OneDnnBf16Products, EachIsTheFp32SumOfTheBf16RoundedOperandsProducts) {
  for (std::size_t i = 0; i < kCalls.size(); ++i) {
    Product p = make_product(kCalls[i], std::uint32_t(i + 1));
    run(p);
    expect_within_bound(p, describe(kCalls[i]));
    // A second call of the same shape (the primitive made once, then reused) gives the same bits.
    std::vector<float> first = p.c;
    p.c = p.c0;
    run(p);
    EXPECT_EQ(p.c, first) << "call " << i;
  }
}

// The same products in fp32 miss the bound: the rounding to BF16 is what the library computes with.
TEST_F(OneDnnBf16Products, Fp32ProductsOfTheSameOperandsAreOutsideTheBound) {
  Product p = make_product(kCalls[0], 1);
  run(p);
  EXPECT_LE(worst_error_over_bound(p), 1.0);
  make_cpu_gemm("onednn").sgemm(false, true, 128, 768, 256, 1.0f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.0f,
                                p.c.data(), p.ldc);
  EXPECT_GT(worst_error_over_bound(p), 10.0);  // far outside: ~2⁻⁹ per term against k·2⁻²⁴
}

// B given in BF16 (a weight the engine holds in BF16) gives the bits of B given in fp32: rounding is all the fp32
// path does to it. Every call of the list, B's leading dimension padded as stored.
TEST_F(OneDnnBf16Products, BGivenInBf16GivesTheBitsOfBGivenInFp32) {
  for (std::size_t i = 0; i < kCalls.size(); ++i) {
    Product p = make_product(kCalls[i], std::uint32_t(50 + i));
    run(p);
    std::vector<bf16> b16(p.b.size());
    to_bf16(p.b.data(), b16.data(), b16.size());
    std::vector<float> c = p.c0;
    const Call& k = p.call;
    onednn_bf16_gemm_bf16_b(k.trans_a, k.trans_b, k.m, k.n, k.k, k.alpha, p.a.data(), p.lda, b16.data(), p.ldb,
                            k.beta, c.data(), p.ldc);
    EXPECT_EQ(c, p.c) << describe(k);
  }
}

// The cpu backend multiplies a weight view (acquire_weights) from the BF16 weights it was made from, in the
// forward (A·wᵀ) and the input gradient (A·w): the same bits as the same weights in a caller's fp32 array; and
// the BF16 weights are what it reads (changing them after the view was made changes the product).
TEST_F(OneDnnBf16Products, TheBackendMultipliesWeightViewsFromTheirBf16Weights) {
  const std::size_t N = 64, T = 32, C = 48, OC = 80;
  auto backend = make_cpu_backend("onednn-bf16");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = value(rng);
    return v;
  };
  const std::vector<float> in = random(N * C), dout = random(N * OC), bias = random(OC);
  std::vector<bf16> w16(OC * C + 16);  // the view holds more than this weight: it starts 16 elements in
  for (std::size_t i = 0; i < w16.size(); ++i) w16[i] = to_bf16(value(rng));
  std::vector<float> w(OC * C);
  to_float(w16.data() + 16, w.data(), w.size());
  backend->reserve_weight_views(w16.size(), 1);
  const float* view = static_cast<const float*>(backend->acquire_weights(w16.data(), w16.size())) + 16;
  struct Result {
    std::vector<float> out, din;
  };
  const auto products = [&](const float* weights) {
    Result r{std::vector<float>(N * OC), std::vector<float>(N * C, 0.5f)};
    backend->matmul_forward(r.out.data(), in.data(), weights, bias.data(), N, T, C, OC, OC);
    std::vector<float> dw(OC * C, 0.0f);
    backend->matmul_backward(r.din.data(), dw.data(), nullptr, dout.data(), in.data(), weights, N, T, C, OC, OC);
    return r;
  };
  const Result from_view = products(view), from_array = products(w.data());
  EXPECT_EQ(from_view.out, from_array.out);
  EXPECT_EQ(from_view.din, from_array.din);
  for (std::size_t i = 16; i < w16.size(); ++i) w16[i] = to_bf16(-to_float(w16[i]));
  const Result negated = products(view);
  for (std::size_t i = 0; i < N * OC; i += 97) EXPECT_NE(negated.out[i], from_view.out[i]) << i;
  for (std::size_t i = 0; i < N * C; i += 97) EXPECT_NE(negated.din[i], from_view.din[i]) << i;
  backend->release_weights(view - 16);
}

// The backend calls it from every thread of an OpenMP team at once, each with its own shapes: each thread's
// primitives, scratchpad and BF16 operands are its own.
TEST_F(OneDnnBf16Products, ThreadsOfATeamCallingAtOnceGetTheirOwnProducts) {
  std::vector<Product> products;
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < kCalls.size(); ++i) products.push_back(make_product(kCalls[i], 100 + round * 10 + i));
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
  for (std::size_t i = 0; i < products.size(); ++i) run(products[i]);
  for (const Product& p : products) expect_within_bound(p, describe(p.call));
}

// Batched products (attention's, all heads of a window in one call): each matrix of the batch within the bound of
// its own product, for every combination of transposes, attention's shapes and awkward ones (m = 1, k = 1, sizes
// no multiple of 16), alpha and beta as above.
TEST_F(OneDnnBf16Products, BatchedProductsAreEachWithinTheBound) {
  const std::vector<Call> calls = {{false, false, 128, 128, 64, 0, 0.125f, 0.0f},
                                   {false, false, 128, 64, 128, 0, 1.0f, 0.0f},
                                   {true, false, 33, 19, 7, 0, 1.0f, 0.5f},
                                   {false, true, 1, 17, 33, 0, -1.0f, 0.0f},
                                   {true, true, 9, 11, 1, 0, 0.5f, 1.0f}};
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (const Call& call : calls) {
    const int batch = 3;
    const std::size_t a_size = std::size_t(call.m) * call.k, b_size = std::size_t(call.k) * call.n,
                      c_size = std::size_t(call.m) * call.n;
    std::vector<bf16> a(batch * a_size), b(batch * b_size);
    for (bf16& x : a) x = to_bf16(value(rng));
    for (bf16& x : b) x = to_bf16(value(rng));
    std::vector<float> c0(batch * c_size);
    for (float& x : c0) x = value(rng);
    std::vector<float> c = c0;
    onednn_bf16_batched_gemm(call.trans_a, call.trans_b, batch, call.m, call.n, call.k, call.alpha, a.data(),
                             b.data(), call.beta, c.data());
    for (int i = 0; i < batch; ++i) {
      // Matrix i as one product of fp32 operands holding the BF16 values (their rounding is exact).
      Product p{.call = call,
                .lda = call.trans_a ? call.m : call.k,
                .ldb = call.trans_b ? call.k : call.n,
                .ldc = call.n,
                .a = std::vector<float>(a_size),
                .b = std::vector<float>(b_size),
                .c0 = std::vector<float>(c0.begin() + std::ptrdiff_t(i * c_size),
                                         c0.begin() + std::ptrdiff_t((i + 1) * c_size)),
                .c = std::vector<float>(c.begin() + std::ptrdiff_t(i * c_size),
                                        c.begin() + std::ptrdiff_t((i + 1) * c_size))};
      to_float(a.data() + i * a_size, p.a.data(), a_size);
      to_float(b.data() + i * b_size, p.b.data(), b_size);
      expect_within_bound(p, describe(call) + " batch element " + std::to_string(i));
    }
  }
}

}  // namespace
}  // namespace dptrain
