// The data-parallel engine: the model's state (BF16 weights, gradients, fp32 master copy, Adam m and v), sharded
// over the ranks by ZeRO stage, and one training step: K micro-steps of forward and backward over this rank's
// windows, each unit's gradient handed to the comm executor as soon as the last micro-step completes it (all-reduce,
// or reduce-scatter from stage 1 on), global-norm clipping, AdamW on the rank's own slices, and the all-gather of
// the updated weights (stages 1, 2) or of each unit before it is used (stage 3).
//
// What each stage keeps per rank (Ψ parameters, d ranks, N = Ψ; "padded" = Σ of the padded units ≈ Ψ):
//   stage | BF16 weights | gradient (wire dtype) | fp32 master, m, v
//   0     | [N]          | [padded]              | [N]
//   1     | [N]          | [padded]              | own slices [padded/d]
//   2     | [N]          | own slices            | own slices
//   3     | own slices   | own slices            | own slices
// plus, on the CPU backend, fp32 working copies of the weights and of the gradient accumulator [N] each (OpenBLAS
// multiplies fp32; a BF16 GPU backend has no such copies).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/gpt.hpp"
#include "dptrain/core/dtype.hpp"
#include "dptrain/dp/buffer_pool.hpp"
#include "dptrain/dp/comm_executor.hpp"
#include "dptrain/dp/timeline.hpp"
#include "dptrain/dp/unit_plan.hpp"
#include "dptrain/model/layout.hpp"

namespace dptrain {

// How the engine talks to the other ranks. One rank may leave collectives null.
struct RankGroup {
  int rank = 0, size = 1;
  Collectives* collectives = nullptr;
  // Sum of one double per rank, added in rank order so every rank gets the same bits.
  std::function<double(double)> sum_scalar = [](double x) { return x; };
};

struct EngineSettings {
  DType grad_dtype = DType::bf16;  // the gradient on the wire
  int zero_stage = 0;              // 0–3
  double bucket_mb = 25;           // unit size in MiB of gradient; 0 = one unit per block
  bool overlap = true;             // false: the same collectives, issued after backward ends
  int grad_accum = 1;              // micro-steps per step
};

struct StepResult {
  double loss = 0;       // global mean loss of the step's B·Q positions
  double grad_norm = 0;  // global L2 norm of the averaged gradient, before clipping
  bool finite = true;    // loss and norm are finite (the update was skipped otherwise)
  // Compute-thread time by phase, seconds (forward and backward summed over micro-steps).
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  // Time the compute thread waited for the comm executor: for the gradient after backward ended, and for weight
  // all-gathers (stages 1–3).
  double exposed_comm_s = 0;
  // The communicating micro-step's backward time up to each unit's completion, per unit in launch order (the
  // first includes the LM head): what the overlap model needs.
  std::vector<double> unit_backward_s;
};

struct OptimizerSettings {
  double lr = 0, weight_decay = 0, grad_clip = 0;
};

// Bytes this rank holds, by category. weights, gradients and optimizer are what SYSTEMS-MODEL.md's ZeRO table
// counts.
struct MemoryUse {
  std::size_t weights = 0, gradients = 0, optimizer = 0;
  std::size_t communication = 0;  // staging buffers of the collectives
  std::size_t activations = 0;    // activations and backward scratch of one micro-batch
  std::size_t working_copies = 0; // the CPU backend's fp32 weights and gradient accumulator
};

// Where this rank's optimizer state of one unit lives: the flat elements it updates and their first index in
// master()/adam_m()/adam_v().
struct OptimizerPiece {
  FlatRange flat;
  std::size_t at = 0;
};

class DataParallelEngine {
 public:
  // local_windows: this rank's windows per step (a multiple of settings.grad_accum).
  DataParallelEngine(const ModelConfig& config, Backend& backend, RankGroup group, EngineSettings settings,
                     std::size_t local_windows);
  ~DataParallelEngine();

  // Fresh weights from the seed (identical on every rank: the initialisation is a pure function of the seed).
  void initialise(std::uint64_t seed);

  // One optimizer step over this rank's windows [local_windows, Q+1]; global_windows = B.
  StepResult step(const std::int32_t* windows, std::size_t global_windows, const OptimizerSettings& optimizer);

  // Σ of position losses over windows [n, Q+1] (no gradient), for validation. Collective from stage 3 on (the
  // weights are gathered first): every rank calls it, with n = 0 if it has no windows.
  double loss_sum(const std::int32_t* windows, std::size_t n);

  // The collectives, once the ranks are connected (before the first step).
  void set_collectives(Collectives* collectives) { group_.collectives = collectives; }

  const ParameterLayout& layout() const { return layout_; }
  const UnitPlan& plan() const { return plan_; }
  int rank() const { return group_.rank; }
  int ranks() const { return group_.size; }
  const EngineSettings& settings() const { return settings_; }
  int optimizer_step() const { return optimizer_step_; }  // steps taken so far

  // The full BF16 weights [N]. Collective at stage 3 (every rank calls it; the units are all-gathered).
  std::vector<bf16> full_weights();
  // Replaces the weights with w [N] (every rank passes the same); stage 3 keeps its own slices.
  void set_full_weights(const bf16* w);
  // This rank's optimizer state: master, m, v hold the pieces' elements (for checkpoints).
  const std::vector<OptimizerPiece>& optimizer_pieces() const { return optimizer_pieces_; }
  std::vector<float>& master() { return master_; }
  std::vector<float>& adam_m() { return adam_m_; }
  std::vector<float>& adam_v() { return adam_v_; }
  // After the weights or optimizer state were replaced (checkpoint), at optimizer step `step`.
  void restored(int step);

  // FNV-1a hash of the full BF16 weights: equal on all ranks when they agree. Collective at stage 3.
  std::uint64_t weights_hash();

  MemoryUse memory() const;
  Timeline& timeline() { return timeline_; }

 private:
  bool distributed() const { return group_.size > 1 && group_.collectives; }
  std::size_t wire_bytes() const { return element_size(settings_.grad_dtype); }
  std::string part_name(FlatRange range) const;
  void micro_step(const std::int32_t* windows, float dloss, bool last, StepResult& result, double& loss);
  void gradient_ready(FlatRange range, bool last, StepResult& result);
  void launch_gradient(std::size_t unit);
  void* gradient_slice(std::size_t unit);  // this rank's reduced slice of a unit, in the wire dtype
  double global_grad_norm();
  void update(const OptimizerSettings& optimizer, float grad_scale, StepResult& result);
  // Runs on the comm executor: one collective over a whole padded unit, recorded on the timeline.
  void collective(CollectiveOp op, std::size_t unit, void* data, DType dtype);
  // Blocks the compute thread until a ticket is done; the time counts as exposed communication.
  void wait_for_comm(CommExecutor::Ticket ticket, const char* what);
  // Weight all-gathers (stages 1–3): own = this rank's slice (own_count real elements, the rest padding).
  void launch_weight_gather(std::size_t unit, const bf16* own, std::size_t own_count);
  void launch_weight_gather_from_shard(std::size_t unit);  // stage 3
  const bf16* gathered(std::size_t unit);                 // waits; the padded unit [padded]
  void release_gathered(std::size_t unit);
  void take_gathered_weights(std::size_t unit);  // stages 1, 2: the gathered unit into the weights, released
  void gather_all_units(const std::function<void(std::size_t, const bf16*)>& use);  // stage 3
  // Stage 3: makes sure a range's unit is in the working copy for the current pass, prefetching the next.
  void weights_needed(FlatRange range, const std::vector<std::size_t>& pass_order);
  void refresh_compute_weights();

  ParameterLayout layout_;
  Backend& backend_;
  RankGroup group_;
  EngineSettings settings_;
  UnitPlan plan_;
  Gpt gpt_;
  std::size_t micro_windows_;
  int optimizer_step_ = 0;

  std::vector<bf16> weights_;                    // [N], stage 3: own slices [shard]
  std::vector<float> master_, adam_m_, adam_v_;  // [N], stages 1–3: own slices [shard]
  std::vector<std::byte> gradient_;              // wire dtype: [padded] (stages 0, 1) or own slices [shard]
  std::vector<OptimizerPiece> optimizer_pieces_; // per unit, launch order
  std::vector<float> weights_f32_, grads_f32_;   // [N] CPU working copies

  CommExecutor executor_;
  BufferPool staging_;
  Timeline timeline_;
  // Per unit, launch order: staging buffers in flight and the tickets of their collectives.
  std::vector<BufferPool::Buffer> gradient_staging_, weight_staging_;
  std::vector<CommExecutor::Ticket> gradient_tickets_, weight_tickets_;
  std::vector<char> present_;                // stage 3: unit gathered for the current pass
  std::vector<std::size_t> forward_order_, backward_order_;  // stage 3: units in the order each pass needs them
  double unit_clock_ = 0;                    // when the previous range's gradient completed
  double waited_s_ = 0;                      // exposed communication of the current step
  int step_number_ = 0;                      // the step being taken, 1-based (for the timeline)
};

}  // namespace dptrain
