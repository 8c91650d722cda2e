// The MLP's product and GELU as one operation (Backend::matmul_gelu_forward, gelu_matmul_backward): on the cpu
// backend the composition of matmul and GELU, on a BF16 backend GELU in the GEMM's epilogue (cuBLASLt's
// GELU_AUX_BIAS and DGELU; the harness's replay of them) wherever the shape allows, the composition elsewhere.
//
// The products are made exact (rows of `in` and `dout` are unit vectors), so that pre holds chosen values x
// exactly, out = gelu(x) and dpre = gelu'(x) rounded once to the activation dtype. That checks the layout of out,
// pre and dpre (every element a different x) and the form of the GELU: at x ≤ −2.5 the tanh approximation and the
// exact (erf) GELU differ by 3–80 % of the value (GELU' by 3–50 % at x ≤ −3), outside one BF16 rounding (2⁻⁸), which
// the test verifies of its own values before it relies on it. The bound on each element: one rounding to the
// activation dtype of a value within 1e-6·(1 + |x|) of the double-precision result (fp32 tanh and arithmetic).
// On a GPU, cuBLASLt's GELU epilogues take tanh from the hardware's approximation (MUFU.TANH, PTX's
// tanh.approx.f32: relative error up to 2⁻¹⁰·⁹⁹, seen in the SASS of its AUX and DGELU kernels), which adds
// ε·|t| to t = tanh(u), u = k0·(x + k1·x³): ½·|x|·ε·|t| to GELU, ε·|t|·(½ + |x|·|t|·k0·(1 + 3·k1·x²)) to GELU';
// in the tail that is more than the two forms differ by (at x = −4, ~1e-3 against 6e-5), so there the form is
// checked on the other backends only.
// The parameter gradients (dw, dbias) are bitwise what matmul_backward gives on the same backend. A harness whose
// GEMM refuses the epilogue after running part of a product shows the composition rewriting all of it.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

constexpr double kK0 = 0.7978845608028654, kK1 = 0.044715;                   // √(2/π), the cubic's coefficient
double tanh_of(double x) { return std::tanh(kK0 * (x + kK1 * x * x * x)); }  // t = tanh(u)
double gelu_tanh(double x) { return 0.5 * x * (1 + tanh_of(x)); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
// Derivatives by central differences in double: step 1e-5, error ~1e-10, far below the bounds here.
template <typename F>
double derivative(F f, double x) {
  return (f(x + 1e-5) - f(x - 1e-5)) / 2e-5;
}

// Values of x exactly representable in BF16, every one of them tested in the tail where the GELU's form shows.
const std::vector<float> kValues = {-4.0f, -3.0f, -2.5f, -2.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f};
// Where the two forms differ by more than 4 bounds (checked): GELU at x ≤ −2.5, GELU' at x ≤ −3.
constexpr float kGeluTail = -2.5f, kDerivativeTail = -3.0f;

class MatmulGelu : public test::BackendTest<> {
 protected:
  std::mt19937 rng_{5};
  // The relative error of the tanh the epilogues use: the hardware's approximation on a GPU (2⁻¹⁰, above its
  // 2⁻¹⁰·⁹⁹), none beyond fp32's elsewhere (the cpu backend and the harness compute tanhf).
  double tanh_error() const { return be->name() == "cuda" && be->fuses_matmul_epilogues() ? 0x1p-10 : 0.0; }
  // The error tanh_error() puts into GELU (derivative false) or GELU' (true) at x.
  double approximation_error(double x, bool derivative) const {
    const double t = std::abs(tanh_of(x)), e = tanh_error() * t;
    return derivative ? e * (0.5 + std::abs(x) * t * kK0 * (1 + 3 * kK1 * x * x)) : 0.5 * std::abs(x) * e;
  }
  double bound(double value, double x, bool derivative) const {
    const double e = approximation_error(x, derivative);
    return test::unit_roundoff(act()) * (std::abs(value) + e) + e + 1e-6 * (1 + std::abs(x));
  }
  // Expects got within bound of the tanh form, and for x ≤ tail, where the backend's tanh is accurate, that the
  // erf form lies outside 4 bounds.
  void expect_tanh_form(double got, double x, double tanh_form, double erf_form, double tail, bool derivative,
                        const char* what) const {
    EXPECT_NEAR(got, tanh_form, bound(tanh_form, x, derivative)) << what << " at x = " << x;
    if (x <= tail && tanh_error() == 0) {
      ASSERT_GT(std::abs(tanh_form - erf_form), 4 * bound(tanh_form, x, derivative))
          << "the test cannot tell the forms apart";
    }
  }
};

// (N rows, C in, OC out): fusable on a BF16 backend with N = 9 split into aligned parts; not fusable (k = 13, OC 5).
struct Shape {
  std::size_t N, C, OC;
  std::string describe() const {
    return "N " + std::to_string(N) + " C " + std::to_string(C) + " OC " + std::to_string(OC);
  }
};
const Shape kShapes[] = {{9, 8, 16}, {9, 16, 24}, {7, 13, 5}};

// pre[i,o] = in[i]·w[o] + bias[o] with in[i] = e_(i mod C) and bias 0 (given, so that the bias epilogue is the one
// fused): pre[i,o] = w[o, i mod C], which runs through kValues.
TEST_P(MatmulGelu, ForwardIsTheTanhGeluOfTheProductAndKeepsTheProduct) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.describe());
    std::vector<float> in(s.N * s.C, 0.0f), w(s.OC * s.C);
    for (std::size_t i = 0; i < s.N; ++i) in[i * s.C + i % s.C] = 1.0f;
    for (std::size_t k = 0; k < w.size(); ++k) w[k] = kValues[k % kValues.size()];
    for (const bool with_bias : {true, false}) {
      auto out = activations(std::vector(s.N * s.OC, 123.0f)), pre = activations(std::vector(s.N * s.OC, 123.0f));
      be->matmul_gelu_forward(out.data(), pre.data(), activations(in).data(), compute_weights(w).data(),
                              with_bias ? compute_weights(std::vector(s.OC, 0.0f)).data() : nullptr, s.N, 1, s.C,
                              s.OC);
      const auto o = out.download(), p = pre.download();
      for (std::size_t i = 0; i < s.N; ++i)
        for (std::size_t c = 0; c < s.OC; ++c) {
          const double x = w[c * s.C + i % s.C];
          ASSERT_EQ(p[i * s.OC + c], float(x)) << "pre[" << i << "," << c << "]";
          expect_tanh_form(o[i * s.OC + c], x, gelu_tanh(x), gelu_erf(x), kGeluTail, false, "gelu");
        }
    }
  }
  // The shape whose k (13) the aligned parts would split is composed, and said to be; so are the others where the
  // GEMM refused the epilogue.
  const std::string note = be->matmul_epilogues();
  const auto says = [&note](const char* what) { return note.find(what) != std::string::npos; };
  EXPECT_EQ(says("gelu forward 7×13→5: k or the row length not a multiple of 8"), be->fuses_matmul_epilogues())
      << note;
  if (be->name() == test::kCudaOnCpu) {
    EXPECT_FALSE(says("9×8→16")) << note;  // the harness has every kernel
  }
  if (be->name() == test::kCudaOnCpuRefusingEpilogues) {
    EXPECT_TRUE(says("gelu forward 9×8→16: no kernel took the epilogue")) << note;
  }
}

// dpre[i,c] = (dout[i]·w)[c]·gelu'(pre[i,c]) with dout[i] = e_(i mod OC) and w's rows all ones: dpre = gelu'(pre),
// pre running through kValues. dw and dbias against matmul_backward's, bitwise.
TEST_P(MatmulGelu, BackwardIsTheProductTimesTheTanhGeluDerivative) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.describe());
    std::vector<float> dout(s.N * s.OC, 0.0f), pre(s.N * s.C);
    for (std::size_t i = 0; i < s.N; ++i) dout[i * s.OC + i % s.OC] = 1.0f;
    for (std::size_t k = 0; k < pre.size(); ++k) pre[k] = kValues[k % kValues.size()];
    const auto d_dout = activations(dout), d_pre = activations(pre);
    const auto d_in = activations(test::representable(act(), test::uniform(rng_, s.N * s.C, -1, 1)));
    const auto d_w = compute_weights(std::vector(s.OC * s.C, 1.0f));
    const auto start_dw = test::uniform(rng_, s.OC * s.C, -1, 1), start_db = test::uniform(rng_, s.OC, -1, 1);
    auto dpre = activations(std::vector(s.N * s.C, 123.0f));
    auto dw = gradients(start_dw), db = gradients(start_db), dw_ref = gradients(start_dw),
         db_ref = gradients(start_db);
    be->gelu_matmul_backward(dpre.data(), dw.data(), db.data(), d_dout.data(), d_in.data(), d_w.data(), d_pre.data(),
                             s.N, 1, s.C, s.OC);
    be->matmul_backward(nullptr, dw_ref.data(), db_ref.data(), d_dout.data(), d_in.data(), d_w.data(), s.N, 1, s.C,
                        s.OC, s.OC);
    const auto d = dpre.download();
    for (std::size_t i = 0; i < s.N; ++i)
      for (std::size_t c = 0; c < s.C; ++c) {
        const double x = pre[i * s.C + c];
        expect_tanh_form(d[i * s.C + c], x, derivative(gelu_tanh, x), derivative(gelu_erf, x), kDerivativeTail, true,
                         "gelu'");
      }
    EXPECT_EQ(dw.download(), dw_ref.download());
    EXPECT_EQ(db.download(), db_ref.download());
  }
}

// Every backend under test, and the harness whose GEMM refuses the epilogue halfway through a product.
std::vector<std::string> backends() {
  std::vector<std::string> names = test::backends_under_test();
  names.push_back(test::kCudaOnCpuRefusingEpilogues);
  return names;
}
INSTANTIATE_TEST_SUITE_P(Backends, MatmulGelu, ::testing::ValuesIn(backends()), test::TestName());

}  // namespace
}  // namespace dptrain
