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
// plus the gradient accumulator [N] in the backend's gradient dtype (the backward pass adds into it over the
// micro-steps; each unit is cast to the wire dtype when complete) and the backend's compute views of the weights:
// on the cpu backend an fp32 mirror of the whole model at stages 0–2, of the units in use (at most two: the
// embeddings, needed again by the tied head, and one other) at stage 3.
//
// Every array lives in the backend's device memory: the host reads and writes them only through download and
// upload (checkpoints, weight hashes, initialisation), never on the step's path. The engine's code is in three
// files: engine_state.cpp (the buffers, initialisation, checkpoint access, memory), unit_communication.cpp (the
// units' collectives on the comm executor, weight gathers and stage 3's weight access) and engine_step.cpp (one
// step: micro-steps, the global norm, the sharded AdamW update, evaluation).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/gpt.hpp"
#include "dptrain/core/dtype.hpp"
#include "dptrain/core/memory.hpp"
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
  // Sum of one double per rank, added in rank order so every rank gets the same bits; the largest of them.
  std::function<double(double)> sum_scalar = [](double x) { return x; };
  std::function<double(double)> max_scalar = [](double x) { return x; };
  // Ends the whole job with `message` (the trainer: "rank R: message" and MPI_Abort); must not return. Called by
  // the comm watchdog when a collective does not complete in time, since the other ranks may wait for ever. Not by
  // throwing, by default: the collective still runs on the comm thread, into buffers an unwinding step would free.
  std::function<void(const std::string&)> abort = [](const std::string& message) {
    std::fprintf(stderr, "dptrain: %s\n", message.c_str());
    std::abort();
  };
};

// Time an exchange between steps may take beyond --comm-timeout, where it waits for work of its own on some rank.
struct WaitAllowance {
  double seconds = 0;
  const char* for_what = "";  // "rank 0's writing at 10 MB/s", for the line that ends the job
};

struct EngineSettings {
  DType grad_dtype = DType::bf16;  // the gradient on the wire
  int zero_stage = 0;              // 0–3
  double bucket_mb = 25;           // unit size in MiB of gradient; 0 = one unit per block
  bool overlap = true;             // false: the same collectives, issued after backward ends
  int grad_accum = 1;              // micro-steps per step
  // The compute thread's longest wait for one piece of communication before it gives up on the job (a stopped
  // rank or a dead link would otherwise hang every rank for ever).
  double comm_timeout_s = 300;
};

struct StepResult {
  double loss = 0;       // global mean loss of the step's B·Q positions
  double grad_norm = 0;  // global L2 norm of the averaged gradient, before clipping
  bool finite = true;    // loss and norm are finite (the update was skipped otherwise)
  // Compute-thread time by phase, seconds (forward and backward summed over micro-steps).
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  // Exposed communication: the time the compute stream stood idle while the compute thread waited for the comm
  // executor (for the gradient after backward ended, and for weight all-gathers at stages 1–3), measured by events
  // on the compute stream (on the cpu: the waits themselves).
  double exposed_comm_s = 0;
  // The communicating micro-step's backward time up to each unit's completion, per unit in launch order (the
  // first includes the LM head): what the overlap model needs.
  std::vector<double> unit_backward_s;
};

struct OptimizerSettings {
  double lr = 0, weight_decay = 0, grad_clip = 0;
};

// Bytes this rank holds, by category. weights, gradients and optimizer are what docs/systems-model.md's ZeRO table
// counts.
struct MemoryUse {
  std::size_t weights = 0, gradients = 0, optimizer = 0;
  std::size_t communication = 0;   // staging buffers of the collectives
  std::size_t activations = 0;     // the activation arena (activations and backward scratch of one micro-batch)
                                   // and the backend's operation scratch
  std::size_t working_copies = 0;  // the gradient accumulator and the backend's compute views of the weights
};

// Where this rank's optimizer state of one unit lives: the flat elements it updates and their first index in
// the optimizer state's arrays.
struct OptimizerPiece {
  FlatRange flat;
  std::size_t at = 0;
};

// A host copy of this rank's optimizer state (for checkpoints): fp32 master, m and v, each holding the pieces'
// elements at their `at`.
struct OptimizerState {
  std::vector<float> master, m, v;
};

class DataParallelEngine {
 public:
  // local_windows: this rank's windows per step (a multiple of settings.grad_accum). The engine reserves the
  // backend's weight views: one engine per backend.
  DataParallelEngine(const ModelConfig& config, Backend& backend, RankGroup group, EngineSettings settings,
                     std::size_t local_windows);
  ~DataParallelEngine();

  // Fresh weights from the seed (identical on every rank: the initialisation is a pure function of the seed).
  void initialise(std::uint64_t seed);

  // The step number the timeline's events are labelled with from here (the trainer's loop step, 1-based: a skipped
  // step counts, as it does in the step lines and checkpoints).
  void set_timeline_step(int step) { step_number_ = step; }
  // One optimizer step over this rank's windows [local_windows, Q+1]; global_windows = B.
  StepResult step(const std::int32_t* windows, std::size_t global_windows, const OptimizerSettings& optimizer);

  // Σ of position losses over windows [n, Q+1] (no gradient), for validation. Collective from stage 3 on (the
  // weights are gathered first): every rank calls it, with n = 0 if it has no windows.
  double loss_sum(const std::int32_t* windows, std::size_t n);

  // The collectives, once the ranks are connected (before the first step).
  void set_collectives(Collectives* collectives) { group_.collectives = collectives; }
  // The device stream the collectives are issued on (a device transport enqueues its work there): each unit's
  // collective first makes it wait for the compute work, issued before the launch, that wrote the unit's data.
  Stream comm_stream() const { return comm_stream_; }

  const ParameterLayout& layout() const { return layout_; }
  const UnitPlan& plan() const { return plan_; }
  int rank() const { return group_.rank; }
  int ranks() const { return group_.size; }
  const EngineSettings& settings() const { return settings_; }
  // Gradient overlap for the steps that follow (the same collectives in the same order either way).
  void set_overlap(bool overlap) { settings_.overlap = overlap; }
  int optimizer_step() const { return optimizer_step_; }  // steps taken so far

  // The full BF16 weights [N]. Collective at stage 3 (every rank calls it; the units are all-gathered).
  std::vector<bf16> full_weights();
  // Replaces the weights with w [N] (every rank passes the same); stage 3 keeps its own slices.
  void set_full_weights(const bf16* w);
  // This rank's optimizer state (for checkpoints), downloaded from and uploaded to the device.
  const std::vector<OptimizerPiece>& optimizer_pieces() const { return optimizer_pieces_; }
  OptimizerState optimizer_state() const;
  // The pieces' elements only, one piece after another in launch order, without the padding between them: what a
  // checkpoint writes, downloaded without a copy of the whole state.
  OptimizerState packed_optimizer_state() const;
  void set_optimizer_state(const OptimizerState& state);
  // After the weights or optimizer state were replaced (checkpoint), at optimizer step `step`.
  void restored(int step);

  // FNV-1a hash of the full BF16 weights: equal on all ranks when they agree. Collective at stage 3.
  std::uint64_t weights_hash();

  MemoryUse memory() const;
  Timeline& timeline() { return timeline_; }

  // Runs `task` on the comm executor between steps (the ranks' exchange of entry times), so that it keeps its
  // place in the executor's sequence of MPI calls; watched by the same timeout as the step's collectives, plus
  // `allowance.seconds` where the exchange waits for work of its own on some rank (rank 0 writing a checkpoint).
  void run_on_comm_executor(std::function<void()> task, const char* what, WaitAllowance allowance = {});

 private:
  bool distributed() const { return group_.size > 1 && group_.collectives; }
  std::size_t wire_bytes() const { return element_size(settings_.grad_dtype); }
  Device& device() const { return backend_.device(); }
  std::string part_name(FlatRange range) const;
  // -- state (engine_state.cpp)
  void refresh_compute_weights();  // stages 0–2: a new view of the whole weights after they changed
  // -- unit communication (unit_communication.cpp)
  // Runs on the comm executor: one collective over a whole padded unit, recorded on the timeline.
  void collective(CollectiveOp op, std::size_t unit, void* data, DType dtype);
  // Blocks the compute thread until a ticket is done; the time counts as exposed communication.
  void wait_for_comm(CommExecutor::Ticket ticket, const char* what);
  double exposed_communication();  // Σ of the step's compute-stream gaps (waits for their events)
  // Waits for a ticket at most comm_timeout_s (+ the allowance); past it, aborts the job naming the task the
  // executor is stuck in.
  void watched_wait(CommExecutor::Ticket ticket, WaitAllowance allowance = {});
  std::string task_name(CollectiveOp op, std::size_t unit) const;  // "all_reduce on unit blocks 0-11"
  void launch_gradient(std::size_t unit);
  std::byte* gradient_slice(std::size_t unit);  // this rank's reduced slice of a unit, in the wire dtype
  // Weight all-gathers (stages 1–3): own = this rank's slice in device memory (own_count real elements, the rest
  // padding).
  void launch_weight_gather(std::size_t unit, const bf16* own, std::size_t own_count);
  void launch_weight_gather_from_shard(std::size_t unit);  // stage 3
  const bf16* gathered(std::size_t unit);                  // waits; the padded unit [padded]
  void release_gathered(std::size_t unit);
  void take_gathered_weights(std::size_t unit);  // stages 1, 2: the gathered unit into the weights, released
  void gather_all_units(const std::function<void(std::size_t, const bf16*)>& use);  // stage 3
  // Stage 3: the weight access of one pass (units gathered as the pass reaches them, the next one prefetched,
  // each released when the pass has moved on to another unit), and the end of a pass.
  WeightAccess sharded_weights(const std::vector<std::size_t>& pass_order);
  const void* acquire_unit(FlatRange range, const std::vector<std::size_t>& pass_order);
  void release_idle_units(std::size_t except);
  // -- the step (engine_step.cpp)
  WeightAccess weights_for(const std::vector<std::size_t>& pass_order);
  void micro_step(const std::int32_t* windows, float dloss, bool last, StepResult& result);
  void gradient_ready(FlatRange range, bool last, StepResult& result);
  void add_own_squares();  // Σ g² of this rank's slices into the accumulator
  void update(const OptimizerSettings& optimizer, float grad_scale, StepResult& result);

  ParameterLayout layout_;
  Backend& backend_;
  RankGroup group_;
  EngineSettings settings_;
  UnitPlan plan_;
  Gpt gpt_;
  std::size_t micro_windows_;
  int optimizer_step_ = 0;

  // Device memory.
  Buffer weights_;                                // BF16 [N], stage 3: own slices [shard]
  Buffer master_, adam_m_, adam_v_;               // fp32 [N], stages 1–3: own slices [shard]
  Buffer gradient_;                               // wire dtype: [padded] (stages 0, 1) or own slices [shard]
  Buffer gradient_accumulator_;                   // backend gradient dtype [N]
  Buffer accumulators_;                           // double [2]: the step's loss sum and this rank's Σ g²
  std::vector<OptimizerPiece> optimizer_pieces_;  // per unit, launch order
  const void* whole_view_ = nullptr;              // stages 0–2: the backend's view of weights_

  Stream comm_stream_;
  // Per unit: recorded on the compute stream when its gradient or weights are ready for their collective.
  std::vector<Event> gradient_ready_, weight_ready_;
  BufferPool staging_;
  Timeline timeline_;
  // Per unit, launch order: staging buffers in flight and the tickets of their collectives.
  std::vector<BufferPool::Buffer> gradient_staging_, weight_staging_;
  std::vector<CommExecutor::Ticket> gradient_tickets_, weight_tickets_;
  // Stage 3, per unit: the compute view of its gathered weights while in use, and the pass's acquires of it not
  // yet released.
  std::vector<const void*> unit_view_;
  std::vector<int> unit_uses_;
  std::vector<std::size_t> forward_order_, backward_order_;  // stage 3: units in the order each pass needs them
  double unit_clock_ = 0;                                    // when the previous range's gradient completed
  // The compute stream's gaps while the compute thread waited for communication: an event pair per wait (kept and
  // reused), the first gaps_used_ of them recorded since the step began. On the cpu the events hold host times, so
  // a gap is the wait; on a GPU it is the time the compute stream had nothing to run.
  std::vector<std::pair<Event, Event>> gaps_;
  std::size_t gaps_used_ = 0;
  int step_number_ = 0;  // the step its timeline events are labelled with (set_timeline_step)
  // Last, so destroyed first: its thread has finished every task before the buffers, the stream, the staging pool
  // and the timeline those tasks use go away.
  CommExecutor executor_;
};

}  // namespace dptrain
