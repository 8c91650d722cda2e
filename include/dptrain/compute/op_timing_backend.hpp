// Per-operation timing of a Backend (dptrain --op-times): a decorator that forwards every operation to another
// backend and, while its OpTimes is enabled, adds the operation's wall time, one call and its FLOPs to a row per
// operation name.
//
// The GEMM-bearing matmuls are also timed by shape (rows × in → out), which tells the model's products apart (the
// LM head's from the blocks').
//
// The time of an operation runs from a wait for the compute stream before it to one after it, so it is the
// operation's own (on the cpu the wait returns at once; on a GPU timing serialises the compute stream's kernels with
// the host, while a collective in flight on the comm stream goes on and is not counted).
//
// Timed: the model's operations, the gradient and optimizer operations and acquire_weights (the cpu backend
// expands BF16 weights into its fp32 mirror there). Forwarded untimed: name (the inner's, which the rest of the
// program compares), device, dtypes, guarantees, measure_gemm_flops, the reservations, release_weights and the
// byte counts.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dptrain/compute/backend.hpp"

namespace dptrain {

// The timed operations, in the Backend's order.
enum class TimedOp : int {
  acquire_weights,
  embedding_forward,
  embedding_backward,
  layernorm_forward,
  layernorm_backward,
  matmul_forward,
  matmul_backward,
  attention_forward,
  attention_backward,
  gelu_forward,
  gelu_backward,
  matmul_gelu_forward,
  gelu_matmul_backward,
  matmul_residual_forward,
  accumulate,
  softmax_cross_entropy,
  cast,
  reduce_add,
  sum_of_squares,
  adamw,
  count
};
const char* timed_op_name(TimedOp op);

struct OpTimeRow {
  std::string op;             // "matmul_forward"
  bool other_thread = false;  // called from a thread other than the one that made the OpTimes (the comm executor)
  std::uint64_t calls = 0;
  double seconds = 0;
  double flops = 0;
  std::string shape;  // in shape_rows(): the calls' shape, e.g. "2048×768→2304" (rows × in → out)
};

// The accumulated times. Thread-safe: the comm executor's thread calls reduce_add while the compute thread runs
// the model. Calls from a thread other than the one that constructed the OpTimes are kept in rows of their own
// (they overlap the compute thread's time instead of being part of it).
class OpTimes {
 public:
  OpTimes();
  void set_enabled(bool enabled) { enabled_.store(enabled, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Whether the calling thread is the one that constructed it (the compute thread).
  bool on_owner_thread() const { return std::this_thread::get_id() == owner_; }
  // `shape` (the GEMMs': rows × in → out) also adds the call to a row of that op and shape (shape_rows).
  void add(TimedOp op, double seconds, double flops, const std::string& shape = {});
  void reset();
  // The rows with at least one call: the constructing thread's first, each group by time, longest first.
  std::vector<OpTimeRow> rows() const;
  // The constructing thread's calls by op and shape, for the ops timed with one: in op order, each op's shapes by
  // time, longest first. An op's shape rows add up to its row of rows().
  std::vector<OpTimeRow> shape_rows() const;

 private:
  struct Total {
    std::uint64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  static constexpr int kOps = int(TimedOp::count);
  std::atomic<bool> enabled_{false};
  const std::thread::id owner_;
  mutable std::mutex mutex_;
  std::array<Total, 2 * kOps> totals_{};  // [owner thread ops | other threads' ops]
  std::map<std::pair<int, std::string>, Total> shapes_;  // (op, shape), the owner thread's calls
};

// FLOPs of one call of the GEMM-bearing operations (the model's arithmetic, full T×T attention as the cpu backend
// computes it); 0 for the others.
double matmul_forward_flops(std::size_t N, std::size_t C, std::size_t OC);
double matmul_backward_flops(std::size_t N, std::size_t C, std::size_t OC, bool with_din);
double attention_forward_flops(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
double attention_backward_flops(std::size_t B, std::size_t T, std::size_t C, std::size_t NH);

// `inner` with every operation timed into `times`.
std::unique_ptr<Backend> make_op_timing_backend(std::unique_ptr<Backend> inner, std::shared_ptr<OpTimes> times);

}  // namespace dptrain
