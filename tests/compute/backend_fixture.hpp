// Test support for the compute tests: every backend of the factory (backend_names()) under one fixture, arrays on
// its device that upload and download host fp32 values in the backend's activation, weight or gradient dtype, and
// the dtype-dependent parts of the tolerances. A test is written once in host fp32; a backend joins the whole suite
// by joining the factory.
//
// Tolerances: the bounds the tests state were derived for fp32 arithmetic (the cpu backend) in units of fp32's
// round-off u = 2⁻²⁴. tolerance(bound, dtype) is that bound in the same number of round-offs of `dtype`: exactly
// the fp32 bound on fp32, a first (loose) bound for a backend that stores its arrays in BF16 (u = 2⁻⁸).
// Finite-difference checks and bitwise claims are not scaled but skipped where they cannot hold (see skip_*).
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../kernels/cuda_on_cpu_backend.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/dtype.hpp"

namespace dptrain::test {

// ---- host-side dtype arithmetic --------------------------------------------------------------------------------

constexpr double kFp32RoundOff = 0x1p-24;

// Unit round-off of a storage type: 2⁻²⁴ for fp32, 2⁻⁸ for BF16 (8 significant bits, round to nearest).
constexpr double unit_roundoff(DType dtype) { return dtype == DType::f32 ? kFp32RoundOff : 0x1p-8; }

// A bound derived for fp32 (in multiples of u_fp32), as the same multiple of `dtype`'s round-off.
constexpr double tolerance(double fp32_bound, DType dtype) {
  return fp32_bound * (unit_roundoff(dtype) / kFp32RoundOff);
}

// The value an fp32 number becomes when stored in `dtype` (round to nearest even for BF16).
inline float round_to(DType dtype, float x) { return dtype == DType::f32 ? x : round_to_bf16(x); }

inline std::vector<float> representable(DType dtype, std::vector<float> v) {
  for (float& x : v) x = round_to(dtype, x);
  return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  dptrain::to_bf16(v.data(), out.data(), v.size());
  return out;
}

inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  dptrain::to_float(v.data(), out.data(), v.size());
  return out;
}

// ---- arrays on the device --------------------------------------------------------------------------------------

// n elements of T on a device, uploaded from and downloaded to host vectors of T (no conversion).
template <typename T>
class DeviceVector {
 public:
  DeviceVector(Device& device, std::size_t n) : device_(&device), n_(n), buffer_(device, n * sizeof(T)) {}
  DeviceVector(Device& device, const std::vector<T>& host) : DeviceVector(device, host.size()) { upload(host); }

  T* data() const { return buffer_.as<T>(); }
  std::size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    if (host.size() != n_) throw std::logic_error("DeviceVector::upload: size mismatch");
    if (n_ > 0) device_->upload(data(), host.data(), n_ * sizeof(T));
  }
  // Waits for everything issued on the device, then copies.
  std::vector<T> download() const {
    std::vector<T> host(n_);
    device_->synchronize();
    if (n_ > 0) device_->download(host.data(), data(), n_ * sizeof(T));
    return host;
  }

 private:
  Device* device_;
  std::size_t n_;
  Buffer buffer_;
};

// A double accumulator on the device (the loss sum, the squared norm), starting at `initial`.
class DeviceScalar : public DeviceVector<double> {
 public:
  explicit DeviceScalar(Device& device, double initial = 0.0) : DeviceVector(device, std::vector<double>{initial}) {}
  double value() const { return download()[0]; }
};

// n elements in `dtype` on the device; host values are fp32, converted on the way in (rounded to nearest even
// where dtype is BF16) and on the way out (exactly).
class DeviceArray {
 public:
  DeviceArray(Device& device, DType dtype, std::size_t n)
      : dtype_(dtype), f32_(device, dtype == DType::f32 ? n : 0), bf16_(device, dtype == DType::bf16 ? n : 0) {}
  DeviceArray(Device& device, DType dtype, const std::vector<float>& host) : DeviceArray(device, dtype, host.size()) {
    upload(host);
  }

  void* data() const { return dtype_ == DType::f32 ? static_cast<void*>(f32_.data()) : bf16_.data(); }
  DType dtype() const { return dtype_; }
  std::size_t size() const { return dtype_ == DType::f32 ? f32_.size() : bf16_.size(); }

  void upload(const std::vector<float>& host) {
    if (dtype_ == DType::f32) {
      f32_.upload(host);
    } else {
      bf16_.upload(to_bf16(host));
    }
  }
  std::vector<float> download() const { return dtype_ == DType::f32 ? f32_.download() : to_float(bf16_.download()); }

 private:
  DType dtype_;
  DeviceVector<float> f32_;
  DeviceVector<bf16> bf16_;
};

// ---- the fixture -----------------------------------------------------------------------------------------------

// The backend under test, made by the factory, and arrays on its device. A backend of the build that cannot run
// here (cuda without a GPU) is skipped with the reason, so the output counts and names what did not run: the
// fixture then holds a cpu backend only so that the test's members can be constructed, and SetUp skips the body.
class BackendFixture {
 protected:
  explicit BackendFixture(const std::string& backend_name)
      : unavailable(backend_under_test_unavailable(backend_name)),
        be(make_backend_under_test(unavailable.empty() ? backend_name : "cpu")) {}

  Device& device() const { return be->device(); }
  DType act() const { return be->activation_dtype(); }
  DType wt() const { return be->weight_dtype(); }
  DType grad() const { return be->gradient_dtype(); }

  // Activations, compute weights (uploaded directly in weight_dtype(), as a view would hold them) and gradients.
  DeviceArray activations(const std::vector<float>& host) const { return {device(), act(), host}; }
  DeviceArray activations(std::size_t n) const { return {device(), act(), n}; }
  DeviceArray compute_weights(const std::vector<float>& host) const { return {device(), wt(), host}; }
  DeviceArray gradients(const std::vector<float>& host) const { return {device(), grad(), host}; }
  DeviceArray gradients(std::size_t n) const { return {device(), grad(), n}; }
  template <typename T>
  DeviceVector<T> on_device(const std::vector<T>& host) const {
    return {device(), host};
  }

  // Why a check cannot run on this backend; empty where it can. Use as SKIP_UNLESS(skip_unless_repeatable()).
  std::string skip_unless_repeatable() const {
    return be->guarantees().repeatable ? "" : "backend " + be->name() + " does not promise repeatable bits";
  }
  std::string skip_unless_micro_batch_invariant() const {
    return be->guarantees().micro_batch_invariant
               ? ""
               : "backend " + be->name() + " does not promise micro-batch invariant gradients";
  }
  // Finite differences resolve a derivative only where the forward's rounding noise over the step is far below
  // it: with fp32 activations (u = 2⁻²⁴). With BF16 the noise of L over the step exceeds the gradients themselves;
  // a BF16 backend's backward is to be checked against the cpu backend instead.
  std::string skip_unless_fp32_activations() const {
    return act() == DType::f32 ? ""
                               : "finite differences need fp32 activations; backend " + be->name() + " stores " +
                                     std::string(dtype_name(act()));
  }

  std::string unavailable;  // why the backend under test cannot run here; empty when it can
  std::unique_ptr<Backend> be;
};

// Skips the test (from its body or SetUp) with the reason, unless the reason is empty.
#define SKIP_UNLESS(reason)                               \
  if (const std::string why_ = (reason); !why_.empty()) { \
    GTEST_SKIP() << why_;                                 \
  }

// ---- parameters: a backend name, or a backend name and a shape -------------------------------------------------

struct AttentionShape {
  std::size_t B, T, C, NH;
};
inline std::string to_string(const AttentionShape& s) {
  return fmt::format("B{}_T{}_C{}_NH{}", s.B, s.T, s.C, s.NH);
}
inline void PrintTo(const AttentionShape& s, std::ostream* os) { *os << to_string(s); }
using AttentionParam = std::tuple<std::string, AttentionShape>;

inline const std::string& backend_of(const std::string& param) { return param; }
inline const std::string& backend_of(const AttentionParam& param) { return std::get<0>(param); }

inline std::string to_string(const AttentionParam& p) { return std::get<0>(p) + "_" + to_string(std::get<1>(p)); }

// The test names' suffix: INSTANTIATE_TEST_SUITE_P(Backends, Fixture, ..., test::TestName()).
struct TestName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& info) const { return info.param; }
  std::string operator()(const ::testing::TestParamInfo<AttentionParam>& info) const {
    return to_string(info.param);
  }
};

// Every backend under test × the given attention shapes.
template <typename... Shapes>
auto backends_and(Shapes... shapes) {
  return ::testing::Combine(::testing::ValuesIn(backends_under_test()), ::testing::Values(shapes...));
}

// A parametrized fixture over the backends: class OpForward : public test::BackendTest<> { ... };
template <typename Param = std::string>
class BackendTest : public ::testing::TestWithParam<Param>, public BackendFixture {
 protected:
  BackendTest() : BackendFixture(backend_of(this->GetParam())) {}
  void SetUp() override { SKIP_UNLESS(unavailable); }
};

}  // namespace dptrain::test
