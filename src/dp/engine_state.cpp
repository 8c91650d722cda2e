// The engine's state in device memory: buffers by ZeRO stage, initialisation, the full weights and the optimizer
// state as host copies (checkpoints, hashes), and the memory each category holds.
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"
#include "dptrain/dp/engine.hpp"

namespace dptrain {

DataParallelEngine::DataParallelEngine(const ModelConfig& config, Backend& backend, RankGroup group,
                                       EngineSettings settings, std::size_t local_windows)
    : layout_(config),
      backend_(backend),
      group_(std::move(group)),
      settings_(settings),
      plan_(layout_, bucket_bytes(settings.bucket_mb), element_size(settings.grad_dtype), group_.size),
      gpt_(layout_, backend, local_windows / std::size_t(std::max(1, settings.grad_accum))),
      micro_windows_(local_windows / std::size_t(std::max(1, settings.grad_accum))),
      staging_(backend.device()) {
  DP_ASSERT(settings_.zero_stage >= 0 && settings_.zero_stage <= 3);
  DP_ASSERT(settings_.grad_accum >= 1 && local_windows % std::size_t(settings_.grad_accum) == 0);
  const int stage = settings_.zero_stage;
  const std::size_t N = layout_.total(), units = plan_.units().size();
  for (const Unit& u : plan_.units())
    optimizer_pieces_.push_back(stage == 0 ? OptimizerPiece{u.range, u.range.begin}
                                           : OptimizerPiece{u.owned(group_.rank), u.shard_offset});
  Device& d = device();
  const std::size_t optimizer_bytes = (stage == 0 ? N : plan_.shard_total()) * sizeof(float);
  master_ = Buffer(d, optimizer_bytes);
  adam_m_ = Buffer(d, optimizer_bytes);
  adam_v_ = Buffer(d, optimizer_bytes);
  d.zero(adam_m_.data(), optimizer_bytes);
  d.zero(adam_v_.data(), optimizer_bytes);
  weights_ = Buffer(d, (stage == 3 ? plan_.shard_total() : N) * sizeof(bf16));
  gradient_ = Buffer(d, (stage <= 1 ? plan_.padded_total() : plan_.shard_total()) * wire_bytes());
  d.zero(gradient_.data(), gradient_.bytes());
  gradient_accumulator_ = Buffer(d, N * element_size(backend_.gradient_dtype()));
  accumulators_ = Buffer(d, 2 * sizeof(double));
  // Stages 0–2 read the whole model through one view; stage 3 the units in use, the embeddings (whose unit the
  // tied head needs again at the end of forward) and one other.
  std::size_t largest_unit = 0;
  for (const Unit& u : plan_.units()) largest_unit = std::max(largest_unit, u.range.size());
  if (stage < 3)
    backend_.reserve_weight_views(N, 1);
  else
    backend_.reserve_weight_views(largest_unit, 2);
  gradient_staging_.resize(units);
  weight_staging_.resize(units);
  gradient_tickets_.assign(units, 0);
  weight_tickets_.assign(units, 0);
  comm_stream_ = d.create_stream();
  executor_.run([&d] { d.bind_thread(); });  // the comm executor's thread issues device work too
  for (std::size_t u = 0; u < units; ++u) {
    gradient_ready_.push_back(d.create_event());
    weight_ready_.push_back(d.create_event());
  }
  unit_view_.assign(units, nullptr);
  unit_uses_.assign(units, 0);
  // Forward needs the units from the embeddings up; backward the embeddings (head) first, then launch order.
  for (std::size_t u = units; u-- > 0;) forward_order_.push_back(u);
  backward_order_.push_back(units - 1);
  for (std::size_t u = 0; u + 1 < units; ++u) backward_order_.push_back(u);
}

DataParallelEngine::~DataParallelEngine() {
  // The queued tasks finish first. An exception among them is dropped: a destructor must not throw, and the error
  // that ends the run (a collective that failed; later ones on an aborted communicator fail too) has already
  // reached a waiter, which may be unwinding through this destructor now.
  try {
    executor_.wait_all();
  } catch (...) {
  }
  for (const std::vector<Event>* events : {&gradient_ready_, &weight_ready_})
    for (Event event : *events) device().destroy(event);
  for (const auto& [start, end] : gaps_) {
    device().destroy(start);
    device().destroy(end);
  }
  device().destroy(comm_stream_);
  if (whole_view_) backend_.release_weights(whole_view_);
  for (const void* view : unit_view_)
    if (view) backend_.release_weights(view);
}

void DataParallelEngine::initialise(std::uint64_t seed) {
  const std::size_t N = layout_.total();
  std::vector<float> params(N);  // [N]
  initialise_parameters(layout_, seed, params.data());
  std::vector<bf16> weights(N);  // [N]
  to_bf16(params.data(), weights.data(), N);
  set_full_weights(weights.data());
  // The master copy starts equal to the BF16 weights, so a checkpoint of the weights alone describes the model.
  OptimizerState state;
  state.master.resize(master_.bytes() / sizeof(float));
  state.m.assign(state.master.size(), 0.0f);
  state.v.assign(state.master.size(), 0.0f);
  for (const OptimizerPiece& piece : optimizer_pieces_)
    to_float(weights.data() + piece.flat.begin, state.master.data() + piece.at, piece.flat.size());
  set_optimizer_state(state);
  restored(0);
}

void DataParallelEngine::set_full_weights(const bf16* w) {
  Device& d = device();
  if (settings_.zero_stage < 3) {
    d.upload(weights_.data(), w, layout_.total() * sizeof(bf16));
    return;
  }
  d.zero(weights_.data(), weights_.bytes());
  for (const Unit& u : plan_.units()) {
    const FlatRange own = u.owned(group_.rank);
    d.upload(weights_.as<bf16>() + u.shard_offset, w + own.begin, own.size() * sizeof(bf16));
  }
}

OptimizerState DataParallelEngine::optimizer_state() const {
  OptimizerState state;
  const std::size_t n = master_.bytes() / sizeof(float);
  for (auto [host, buffer] : {std::pair{&state.master, &master_}, {&state.m, &adam_m_}, {&state.v, &adam_v_}}) {
    host->resize(n);
    device().download(host->data(), buffer->data(), buffer->bytes());
  }
  return state;
}

OptimizerState DataParallelEngine::packed_optimizer_state() const {
  OptimizerState state;
  std::size_t n = 0;
  for (const OptimizerPiece& piece : optimizer_pieces_) n += piece.flat.size();
  for (auto [host, buffer] : {std::pair{&state.master, &master_}, {&state.m, &adam_m_}, {&state.v, &adam_v_}}) {
    host->resize(n);
    std::size_t at = 0;
    for (const OptimizerPiece& piece : optimizer_pieces_) {
      device().download(host->data() + at, buffer->as<float>() + piece.at, piece.flat.size() * sizeof(float));
      at += piece.flat.size();
    }
  }
  return state;
}

void DataParallelEngine::set_optimizer_state(const OptimizerState& state) {
  for (auto [host, buffer] : {std::pair{&state.master, &master_}, {&state.m, &adam_m_}, {&state.v, &adam_v_}}) {
    DP_ASSERT(host->size() * sizeof(float) == buffer->bytes());
    device().upload(buffer->data(), host->data(), buffer->bytes());
  }
}

void DataParallelEngine::restored(int step) {
  optimizer_step_ = step;
  refresh_compute_weights();
}

void DataParallelEngine::refresh_compute_weights() {
  // Stage 3 makes a view of each unit as a pass gathers it.
  if (settings_.zero_stage == 3) return;
  if (whole_view_) backend_.release_weights(whole_view_);
  whole_view_ = backend_.acquire_weights(weights_.as<bf16>(), layout_.total());
}

std::vector<bf16> DataParallelEngine::full_weights() {
  std::vector<bf16> full(layout_.total());  // [N]
  if (settings_.zero_stage < 3) {
    device().download(full.data(), weights_.data(), weights_.bytes());
    return full;
  }
  gather_all_units([&](std::size_t u, const bf16* unit) {
    const FlatRange r = plan_.units()[u].range;
    device().download(full.data() + r.begin, unit, r.size() * sizeof(bf16));
  });
  return full;
}

std::uint64_t DataParallelEngine::weights_hash() {
  const std::vector<bf16> w = full_weights();
  return fnv1a(w.data(), w.size() * sizeof(bf16));
}

MemoryUse DataParallelEngine::memory() const {
  MemoryUse m;
  m.weights = weights_.bytes();
  m.gradients = gradient_.bytes();
  m.optimizer = master_.bytes() + adam_m_.bytes() + adam_v_.bytes();
  m.communication = staging_.allocated_bytes();
  m.activations = gpt_.activation_bytes() + backend_.scratch_bytes();
  m.working_copies = gradient_accumulator_.bytes() + backend_.weight_view_bytes();
  return m;
}

std::string DataParallelEngine::part_name(FlatRange range) const {
  if (range.begin == layout_.final_norm().begin) return "head + final norm";
  if (range.begin == layout_.embeddings().begin) return "embeddings";
  for (int l = 0; l < layout_.config().layers; ++l)
    if (layout_.block_range(l).begin == range.begin) return fmt::format("block {}", l);
  return "?";
}

}  // namespace dptrain
