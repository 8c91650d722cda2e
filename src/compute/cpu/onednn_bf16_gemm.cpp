#include "dptrain/compute/onednn_bf16_gemm.hpp"

#ifdef DPTRAIN_HAVE_ONEDNN
#include <compare>
#include <cstddef>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "dptrain/core/bf16.hpp"
#endif

#include "dptrain/core/error.hpp"

namespace dptrain {

#ifndef DPTRAIN_HAVE_ONEDNN

std::string onednn_bf16_unavailable() {
  return "--cpu-gemm onednn-bf16: this build has no oneDNN (apt-get install libdnnl-dev and build again); use "
         "--cpu-gemm openblas";
}

void onednn_bf16_sgemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  fail("onednn_bf16_sgemm called in a build without oneDNN");
}

void onednn_bf16_gemm_bf16_b(bool, bool, int, int, int, float, const float*, int, const bf16*, int, float, float*,
                             int) {
  fail("onednn_bf16_gemm_bf16_b called in a build without oneDNN");
}

void onednn_bf16_batched_gemm(bool, bool, int, int, int, int, float, const bf16*, const bf16*, float, float*) {
  fail("onednn_bf16_batched_gemm called in a build without oneDNN");
}

#else

namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A logical [outer, inner] BF16 operand stored row-major with leading dimension ld, or transposed (column-major);
// with batch > 1, `batch` such matrices stored densely one after another (ld = inner, or outer where transposed).
memory::desc bf16_operand(int batch, int outer, int inner, bool transposed, int ld) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  if (batch == 1) return memory::desc({outer, inner}, memory::data_type::bf16, strides);
  return memory::desc({batch, outer, inner}, memory::data_type::bf16,
                      {memory::dim(outer) * inner, strides[0], strides[1]});
}

// A's copy is dense; B is the caller's own BF16 matrix (its ldb) or a dense copy. Batched products are dense.
struct ProductKey {
  bool trans_a, trans_b;
  int batch, m, n, k, ldb, ldc;
  float alpha, beta;
  auto operator<=>(const ProductKey&) const = default;
};

// One primitive and the memory objects a call points at its operands (made once: a call only sets their
// addresses and executes, with no allocation).
struct Product {
  dnnl::matmul matmul;
  memory a, b, c, scratchpad;
};

Product make_product(const ProductKey& key) {
  const memory::desc a_desc = bf16_operand(key.batch, key.m, key.k, key.trans_a, key.trans_a ? key.m : key.k);
  const memory::desc b_desc = bf16_operand(key.batch, key.k, key.n, key.trans_b, key.ldb);
  const memory::desc c_desc =
      key.batch == 1 ? memory::desc({key.m, key.n}, memory::data_type::f32, memory::dims{key.ldc, 1})
                     : memory::desc({key.batch, key.m, key.n}, memory::data_type::f32, memory::format_tag::abc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the thread's own, not a shared global one
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(key.beta);  // C = alpha·A·B + beta·C
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, cpu_engine());
  const dnnl::engine& engine = cpu_engine();
  return {dnnl::matmul(pd), memory(a_desc, engine, DNNL_MEMORY_NONE), memory(b_desc, engine, DNNL_MEMORY_NONE),
          memory(c_desc, engine, DNNL_MEMORY_NONE), memory(pd.scratchpad_desc(), engine, DNNL_MEMORY_NONE)};
}

// What one thread keeps between calls.
struct ThreadState {
  std::map<ProductKey, Product> products;
  std::vector<bf16> a, b;             // the operands rounded to BF16, dense
  std::vector<std::byte> scratchpad;  // oneDNN's, 64-byte aligned inside
  dnnl::stream stream{cpu_engine()};
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

void check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success) fail("oneDNN BF16 matmul: {} failed with status {}", what, int(status));
}

// Rounds rows × cols floats (leading dimension ld) into a dense BF16 buffer.
void round_operand(const float* in, int rows, int cols, int ld, std::vector<bf16>& out) {
  out.resize(std::size_t(rows) * cols);
  for (int r = 0; r < rows; ++r) to_bf16(in + std::size_t(r) * ld, out.data() + std::size_t(r) * cols, cols);
}

// The thread's primitive for `key`, made on its first use.
const Product& product_for(ThreadState& state, const ProductKey& key) {
  auto found = state.products.find(key);
  if (found == state.products.end()) found = state.products.emplace(key, make_product(key)).first;
  return found->second;
}

// Runs `product` on BF16 A and B (as its key describes them) into C.
void execute(ThreadState& state, const Product& product, const bf16* a16, const bf16* b16, float* c) {
  const std::size_t scratch_bytes = product.scratchpad.get_desc().get_size();
  if (state.scratchpad.size() < scratch_bytes + 64) state.scratchpad.resize(scratch_bytes + 64);
  void* scratch = state.scratchpad.data();
  std::size_t space = state.scratchpad.size();
  std::align(64, scratch_bytes, scratch, space);
  // The C API's execute takes the arguments as an array (the C++ one builds a hash map per call).
  const std::pair<const memory*, const void*> bound[] = {
      {&product.a, a16}, {&product.b, b16}, {&product.c, c}, {&product.scratchpad, scratch}};
  for (const auto& [object, address] : bound)
    check(dnnl_memory_set_data_handle_v2(object->get(), const_cast<void*>(address), state.stream.get()),
          "set_data_handle");
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, product.a.get()},
                                  {DNNL_ARG_WEIGHTS, product.b.get()},
                                  {DNNL_ARG_DST, product.c.get()},
                                  {DNNL_ARG_SCRATCHPAD, product.scratchpad.get()}};
  check(dnnl_primitive_execute(product.matmul.get(), state.stream.get(), 4, args), "execute");
}

// C = alpha·op(bf16(A))·op(B16) + beta·C, B16 with leading dimension ldb.
void multiply(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const bf16* b16,
              int ldb, float beta, float* c, int ldc) {
  ThreadState& state = thread_state();
  const Product& product = product_for(state, {trans_a, trans_b, 1, m, n, k, ldb, ldc, alpha, beta});
  round_operand(a, trans_a ? k : m, trans_a ? m : k, lda, state.a);
  execute(state, product, state.a.data(), b16, c);
}

}  // namespace

std::string onednn_bf16_unavailable() {
  static const std::string why = [] {
    const char* line =
        "--cpu-gemm onednn-bf16: oneDNN has no BF16 matmul for this CPU (it needs AVX512_BF16 or AMX, allowed by "
        "ONEDNN_MAX_CPU_ISA where set); use --cpu-gemm onednn or openblas";
    try {
      const memory::desc a({8, 8}, memory::data_type::bf16, memory::format_tag::ab);
      const memory::desc c({8, 8}, memory::data_type::f32, memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), cpu_engine());
      // A reference (scalar) implementation is what oneDNN falls back to without the instructions: refused.
      const std::string impl = pd.impl_info_str();
      return impl.rfind("ref", 0) == 0 ? std::string(line) + " (oneDNN offers only " + impl + ")" : std::string();
    } catch (const dnnl::error&) {
      return std::string(line);
    }
  }();
  return why;
}

void onednn_bf16_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                       const float* b, int ldb, float beta, float* c, int ldc) {
  std::vector<bf16>& b16 = thread_state().b;
  const int cols = trans_b ? k : n;
  round_operand(b, trans_b ? n : k, cols, ldb, b16);
  multiply(trans_a, trans_b, m, n, k, alpha, a, lda, b16.data(), cols, beta, c, ldc);
}

void onednn_bf16_gemm_bf16_b(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                             const bf16* b, int ldb, float beta, float* c, int ldc) {
  multiply(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void onednn_bf16_batched_gemm(bool trans_a, bool trans_b, int batch, int m, int n, int k, float alpha, const bf16* a,
                              const bf16* b, float beta, float* c) {
  ThreadState& state = thread_state();
  execute(state, product_for(state, {trans_a, trans_b, batch, m, n, k, trans_b ? k : n, n, alpha, beta}), a, b, c);
}

#endif

}  // namespace dptrain
