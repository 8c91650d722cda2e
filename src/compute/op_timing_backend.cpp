// The timing decorator of a Backend and the table of times it fills.
#include "dptrain/compute/op_timing_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "dptrain/core/timer.hpp"

namespace dptrain {

const char* timed_op_name(TimedOp op) {
  static constexpr std::array<const char*, std::size_t(TimedOp::count)> names = {"acquire_weights",
                                                                                 "embedding_forward",
                                                                                 "embedding_backward",
                                                                                 "layernorm_forward",
                                                                                 "layernorm_backward",
                                                                                 "matmul_forward",
                                                                                 "matmul_backward",
                                                                                 "attention_forward",
                                                                                 "attention_backward",
                                                                                 "gelu_forward",
                                                                                 "gelu_backward",
                                                                                 "matmul_gelu_forward",
                                                                                 "gelu_matmul_backward",
                                                                                 "matmul_residual_forward",
                                                                                 "accumulate",
                                                                                 "softmax_cross_entropy",
                                                                                 "cast",
                                                                                 "reduce_add",
                                                                                 "sum_of_squares",
                                                                                 "adamw"};
  return names.at(std::size_t(op));
}

OpTimes::OpTimes() : owner_(std::this_thread::get_id()) {}

void OpTimes::add(TimedOp op, double seconds, double flops, const std::string& shape) {
  const bool owner = std::this_thread::get_id() == owner_;
  const int slot = int(op) + (owner ? 0 : kOps);
  std::lock_guard lock(mutex_);
  auto add_to = [&](Total& total) {
    ++total.calls;
    total.seconds += seconds;
    total.flops += flops;
  };
  add_to(totals_[std::size_t(slot)]);
  if (owner && !shape.empty()) add_to(shapes_[{int(op), shape}]);
}

void OpTimes::reset() {
  std::lock_guard lock(mutex_);
  totals_.fill({});
  shapes_.clear();
}

std::vector<OpTimeRow> OpTimes::shape_rows() const {
  std::vector<std::pair<int, OpTimeRow>> ordered;  // (op, row)
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, total] : shapes_)
      ordered.push_back(
          {key.first,
           {timed_op_name(TimedOp(key.first)), false, total.calls, total.seconds, total.flops, key.second}});
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return std::pair(a.first, -a.second.seconds) < std::pair(b.first, -b.second.seconds);
  });
  std::vector<OpTimeRow> rows;
  for (auto& [op, row] : ordered) rows.push_back(std::move(row));
  return rows;
}

std::vector<OpTimeRow> OpTimes::rows() const {
  std::vector<OpTimeRow> rows;
  {
    std::lock_guard lock(mutex_);
    for (int slot = 0; slot < 2 * kOps; ++slot) {
      const Total& total = totals_[std::size_t(slot)];
      if (total.calls > 0)
        rows.push_back(
            {timed_op_name(TimedOp(slot % kOps)), slot >= kOps, total.calls, total.seconds, total.flops, {}});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const OpTimeRow& a, const OpTimeRow& b) {
    return std::pair(a.other_thread, -a.seconds) < std::pair(b.other_thread, -b.seconds);
  });
  return rows;
}

double matmul_forward_flops(std::size_t N, std::size_t C, std::size_t OC) { return 2.0 * double(N) * C * OC; }

double matmul_backward_flops(std::size_t N, std::size_t C, std::size_t OC, bool with_din) {
  return (with_din ? 2 : 1) * matmul_forward_flops(N, C, OC);  // dw, and din
}

// Per window and head: scores q·kᵀ and probs·v, each 2·T·T·hs (the full T×T, as the cpu backend computes them).
double attention_forward_flops(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const double hs = double(C / NH);
  return double(B) * double(NH) * 2 * (2.0 * double(T) * double(T) * hs);
}

// Twice the forward's GEMMs: d(probs) and dv, then dq and dk.
double attention_backward_flops(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  return 2 * attention_forward_flops(B, T, C, NH);
}

namespace {

class OpTimingBackend final : public Backend {
 public:
  OpTimingBackend(std::unique_ptr<Backend> inner, std::shared_ptr<OpTimes> times)
      : inner_(std::move(inner)), times_(std::move(times)), compute_done_(inner_->device().create_event()) {}
  ~OpTimingBackend() override { inner_->device().destroy(compute_done_); }
  OpTimingBackend(const OpTimingBackend&) = delete;
  OpTimingBackend& operator=(const OpTimingBackend&) = delete;

  std::string name() const override { return inner_->name(); }
  Device& device() override { return inner_->device(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  DType weight_dtype() const override { return inner_->weight_dtype(); }
  DType gradient_dtype() const override { return inner_->gradient_dtype(); }
  BackendGuarantees guarantees() const override { return inner_->guarantees(); }
  double measure_gemm_flops() override { return inner_->measure_gemm_flops(); }

  void reserve_weight_views(std::size_t elements, int views) override {
    inner_->reserve_weight_views(elements, views);
  }
  const void* acquire_weights(const bf16* w, std::size_t n) override {
    const void* view = nullptr;
    timed(TimedOp::acquire_weights, 0, [&] { view = inner_->acquire_weights(w, n); });
    return view;
  }
  void release_weights(const void* view) override { inner_->release_weights(view); }
  std::size_t weight_view_bytes() const override { return inner_->weight_view_bytes(); }
  void reserve_scratch(const ModelConfig& config, std::size_t rows) override {
    inner_->reserve_scratch(config, rows);
  }
  std::size_t scratch_bytes() const override { return inner_->scratch_bytes(); }
  std::size_t attention_saved_bytes(std::size_t T, std::size_t C, std::size_t NH) const override {
    return inner_->attention_saved_bytes(T, C, NH);
  }
  std::string attention_name() const override { return inner_->attention_name(); }

  void embedding_forward(void* out, const std::int32_t* tokens, const void* wte, const void* wpe, std::size_t N,
                         std::size_t T, std::size_t C) override {
    timed(TimedOp::embedding_forward, 0, [&] { inner_->embedding_forward(out, tokens, wte, wpe, N, T, C); });
  }
  void embedding_backward(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, std::size_t N,
                          std::size_t T, std::size_t C) override {
    timed(TimedOp::embedding_backward, 0, [&] { inner_->embedding_backward(dwte, dwpe, dout, tokens, N, T, C); });
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* in, const void* w, const void* b,
                         std::size_t N, std::size_t C) override {
    timed(TimedOp::layernorm_forward, 0, [&] { inner_->layernorm_forward(out, mean, rstd, in, w, b, N, C); });
  }
  void layernorm_backward(void* din, void* dw, void* db, const void* dout, const void* in, const void* w,
                          const float* mean, const float* rstd, std::size_t N, std::size_t C) override {
    timed(TimedOp::layernorm_backward, 0,
          [&] { inner_->layernorm_backward(din, dw, db, dout, in, w, mean, rstd, N, C); });
  }
  void matmul_forward(void* out, const void* in, const void* w, const void* bias, std::size_t N, std::size_t T,
                      std::size_t C, std::size_t OC, std::size_t ld_out) override {
    timed(TimedOp::matmul_forward, matmul_forward_flops(N, C, OC),
          [&] { inner_->matmul_forward(out, in, w, bias, N, T, C, OC, ld_out); }, gemm_shape(N, C, OC));
  }
  void matmul_backward(void* din, void* dw, void* dbias, const void* dout, const void* in, const void* w,
                       std::size_t N, std::size_t T, std::size_t C, std::size_t OC, std::size_t ld_out) override {
    timed(TimedOp::matmul_backward, matmul_backward_flops(N, C, OC, din != nullptr),
          [&] { inner_->matmul_backward(din, dw, dbias, dout, in, w, N, T, C, OC, ld_out); }, gemm_shape(N, C, OC));
  }
  void attention_forward(void* out, void* saved, const void* qkv, std::size_t B, std::size_t T, std::size_t C,
                         std::size_t NH) override {
    timed(TimedOp::attention_forward, attention_forward_flops(B, T, C, NH),
          [&] { inner_->attention_forward(out, saved, qkv, B, T, C, NH); });
  }
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const void* saved,
                          std::size_t B, std::size_t T, std::size_t C, std::size_t NH) override {
    timed(TimedOp::attention_backward, attention_backward_flops(B, T, C, NH),
          [&] { inner_->attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH); });
  }
  void gelu_forward(void* out, const void* in, std::size_t n) override {
    timed(TimedOp::gelu_forward, 0, [&] { inner_->gelu_forward(out, in, n); });
  }
  void gelu_backward(void* din, const void* in, const void* dout, std::size_t n) override {
    timed(TimedOp::gelu_backward, 0, [&] { inner_->gelu_backward(din, in, dout, n); });
  }
  // Where the inner backend fuses them, one op each; else the composition, its parts timed as their own ops.
  bool fuses_matmul_epilogues() const override { return inner_->fuses_matmul_epilogues(); }
  std::string matmul_epilogues() const override { return inner_->matmul_epilogues(); }
  void matmul_gelu_forward(void* out, void* pre, const void* in, const void* w, const void* bias, std::size_t N,
                           std::size_t T, std::size_t C, std::size_t OC) override {
    if (!inner_->fuses_matmul_epilogues()) return Backend::matmul_gelu_forward(out, pre, in, w, bias, N, T, C, OC);
    timed(
        TimedOp::matmul_gelu_forward, matmul_forward_flops(N, C, OC),
        [&] { inner_->matmul_gelu_forward(out, pre, in, w, bias, N, T, C, OC); }, gemm_shape(N, C, OC));
  }
  void gelu_matmul_backward(void* dpre, void* dw, void* dbias, const void* dout, const void* in, const void* w,
                            const void* pre, std::size_t N, std::size_t T, std::size_t C, std::size_t OC) override {
    if (!inner_->fuses_matmul_epilogues())
      return Backend::gelu_matmul_backward(dpre, dw, dbias, dout, in, w, pre, N, T, C, OC);
    timed(
        TimedOp::gelu_matmul_backward, matmul_backward_flops(N, C, OC, true),
        [&] { inner_->gelu_matmul_backward(dpre, dw, dbias, dout, in, w, pre, N, T, C, OC); }, gemm_shape(N, C, OC));
  }
  void matmul_residual_forward(void* out, const void* residual, const void* in, const void* w, const void* bias,
                               std::size_t N, std::size_t T, std::size_t C, std::size_t OC) override {
    if (!inner_->fuses_matmul_epilogues())
      return Backend::matmul_residual_forward(out, residual, in, w, bias, N, T, C, OC);
    timed(
        TimedOp::matmul_residual_forward, matmul_forward_flops(N, C, OC),
        [&] { inner_->matmul_residual_forward(out, residual, in, w, bias, N, T, C, OC); }, gemm_shape(N, C, OC));
  }
  void accumulate(void* out, const void* a, std::size_t n, DType dtype) override {
    timed(TimedOp::accumulate, 0, [&] { inner_->accumulate(out, a, n, dtype); });
  }
  void softmax_cross_entropy(void* logits, float* losses, const std::int32_t* targets, std::size_t N, std::size_t V,
                             std::size_t ld, float dloss, double* loss_sum) override {
    timed(TimedOp::softmax_cross_entropy, 0,
          [&] { inner_->softmax_cross_entropy(logits, losses, targets, N, V, ld, dloss, loss_sum); });
  }

  void cast(const void* in, DType from, void* out, DType to, std::size_t n) override {
    timed(TimedOp::cast, 0, [&] { inner_->cast(in, from, out, to, n); });
  }
  void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) override {
    timed(TimedOp::reduce_add, 0, [&] { inner_->reduce_add(acc, incoming, n, dtype); });
  }
  void sum_of_squares(const void* grad, std::size_t n, DType dtype, double* acc) override {
    timed(TimedOp::sum_of_squares, 0, [&] { inner_->sum_of_squares(grad, n, dtype, acc); });
  }
  void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype, std::size_t n,
             const AdamWParams& p) override {
    timed(TimedOp::adamw, 0, [&] { inner_->adamw(master, m, v, weights, grad, dtype, n, p); });
  }

 private:
  // The compute stream synchronised before and after: the time is this operation's alone, not that of work issued
  // before it (nor of another stream's, such as a collective's in flight on the comm stream). Only by the compute
  // thread, which owns the stream and the event: another thread's call (the MPI ring's reduce-add, on the comm
  // executor) is timed as it runs, on the host, as the cpu backend computes it.
  template <typename Operation>
  void timed(TimedOp op, double flops, Operation&& operation, const std::string& shape = {}) {
    if (!times_->enabled()) {
      operation();
      return;
    }
    const bool owner = times_->on_owner_thread();
    if (owner) wait_for_compute();
    const Stopwatch watch;
    operation();
    if (owner) wait_for_compute();
    times_->add(op, watch.seconds(), flops, shape);
  }
  // Rows × in → out; made only while timing (a string per call).
  std::string gemm_shape(std::size_t N, std::size_t C, std::size_t OC) const {
    return times_->enabled() ? fmt::format("{}×{}→{}", N, C, OC) : std::string();
  }
  void wait_for_compute() {
    Device& device = inner_->device();
    device.record(compute_done_, device.compute_stream());
    device.synchronize(compute_done_);
  }

  std::unique_ptr<Backend> inner_;
  std::shared_ptr<OpTimes> times_;
  Event compute_done_;
};

}  // namespace

std::unique_ptr<Backend> make_op_timing_backend(std::unique_ptr<Backend> inner, std::shared_ptr<OpTimes> times) {
  return std::make_unique<OpTimingBackend>(std::move(inner), std::move(times));
}

}  // namespace dptrain
