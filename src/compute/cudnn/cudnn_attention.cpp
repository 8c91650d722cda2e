// cuDNN's fused attention. One graph per direction and shape (B, T, C, NH), made once and cached: forward is
// sdpa(q, k, v) with the causal mask and scale 1/√hs, writing out and the rows' statistics; backward is
// sdpa_backward(q, k, v, out, dout, stats), writing dq, dk and dv into dqkv, in cuDNN's deterministic algorithm
// (its dq is summed in a fixed order, so two runs give the same bits, as every op of the backend promises).
#include "cudnn_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "dptrain/compute/attention_layout.hpp"

namespace dptrain::cuda {

namespace {

namespace fe = cudnn_frontend;
using Graph = std::shared_ptr<fe::graph::Graph>;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// The tensors' ids in a graph's variant pack.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::string version_string(std::size_t version) {  // cuDNN 9: major·10000 + minor·100 + patch
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

void check(fe::error_t status, const char* what) {
  if (status.is_bad()) throw std::runtime_error(fmt::format("cuDNN attention: {}: {}", what, status.get_message()));
}

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuDNN: {}: {}", what, cudnnGetErrorString(status)));
}

Graph new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

Tensor input(const Graph& graph, const char* name, Uid uid, const HeadsView& view) {
  return graph->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({view.dims.begin(), view.dims.end()})
                           .set_stride({view.strides.begin(), view.strides.end()}));
}

void as_output(const Tensor& tensor, Uid uid, const HeadsView& view) {
  tensor->set_output(true)
      .set_uid(uid)
      .set_dim({view.dims.begin(), view.dims.end()})
      .set_stride({view.strides.begin(), view.strides.end()});
}

// Builds the graph's execution plan for this GPU: heuristics' first choice that supports it.
void build(const Graph& graph, cudnnHandle_t handle) {
  check(graph->validate(), "validate");
  check(graph->build_operation_graph(handle), "build_operation_graph");
  check(graph->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  check(graph->check_support(handle), "check_support");
  check(graph->build_plans(handle), "build_plans");
}

struct Shape {
  std::size_t B, T, C, NH;
  auto operator<=>(const Shape&) const = default;
};

float scale_of(const Shape& s) { return float(1.0 / std::sqrt(double(s.C / s.NH))); }

Graph forward_graph(const Shape& s, cudnnHandle_t handle) {
  Graph g = new_graph();
  const Tensor q = input(g, "q", kQ, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::q));
  const Tensor k = input(g, "k", kK, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::k));
  const Tensor v = input(g, "v", kV, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::v));
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(scale_of(s));
  auto [out, stats] = g->sdpa(q, k, v, options);
  as_output(out, kO, out_heads(s.B, s.T, s.C, s.NH));
  as_output(stats, kStats, stats_rows(s.B, s.T, s.NH));
  stats->set_data_type(fe::DataType_t::FLOAT);
  build(g, handle);
  return g;
}

Graph backward_graph(const Shape& s, cudnnHandle_t handle) {
  Graph g = new_graph();
  const Tensor q = input(g, "q", kQ, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::q));
  const Tensor k = input(g, "k", kK, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::k));
  const Tensor v = input(g, "v", kV, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::v));
  const Tensor out = input(g, "out", kO, out_heads(s.B, s.T, s.C, s.NH));
  const Tensor dout = input(g, "dout", kDO, out_heads(s.B, s.T, s.C, s.NH));
  const Tensor stats = input(g, "stats", kStats, stats_rows(s.B, s.T, s.NH));
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(scale_of(s))
                     .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, out, dout, stats, options);
  as_output(dq, kDQ, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::q));
  as_output(dk, kDK, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::k));
  as_output(dv, kDV, qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::v));
  build(g, handle);
  return g;
}

std::int64_t workspace_of(const Graph& g) {
  std::int64_t bytes = 0;
  check(g->get_workspace_size(bytes), "get_workspace_size");
  return bytes;
}

class CudnnAttention final : public FusedAttention {
 public:
  explicit CudnnAttention(cudaStream_t stream) {
    check(cudnnCreate(&handle_), "cudnnCreate");
    check(cudnnSetStream(handle_, stream), "cudnnSetStream");
  }
  ~CudnnAttention() override { cudnnDestroy(handle_); }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  std::string name() const override { return fmt::format("fused (cuDNN {})", version_string(cudnnGetVersion())); }

  std::string unsupported(std::size_t T, std::size_t C, std::size_t NH) override {
    const Shape heads{1, T, C, NH};
    if (const auto found = unsupported_.find(heads); found != unsupported_.end()) return found->second;
    std::string why;
    if (C % NH != 0 || (C / NH) % 8 != 0) {
      why = fmt::format("cuDNN's fused attention needs a head size that is a multiple of 8; this model's is {}/{}",
                        C, NH);
    } else {
      try {
        plans(heads);
      } catch (const std::exception& e) {
        why = fmt::format("cuDNN's fused attention refused heads of T={}, C={}, NH={}: {}", T, C, NH, e.what());
      }
    }
    return unsupported_[heads] = why;
  }

  std::size_t workspace_bytes(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) override {
    return plans({B, T, C, NH}).workspace;
  }

  void forward(bf16* out, float* stats, const bf16* qkv, std::size_t B, std::size_t T, std::size_t C,
               std::size_t NH, void* workspace) override {
    const Plans& p = plans({B, T, C, NH});
    std::unordered_map<std::int64_t, void*> pack = {
        {kQ, const_cast<bf16*>(qkv)},          {kK, const_cast<bf16*>(qkv + C)}, {kV, const_cast<bf16*>(qkv + 2 * C)},
        {kO, out},                             {kStats, stats}};
    check(p.forward->execute(handle_, pack, workspace), "forward");
  }

  void backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* stats, std::size_t B,
                std::size_t T, std::size_t C, std::size_t NH, void* workspace) override {
    const Plans& p = plans({B, T, C, NH});
    std::unordered_map<std::int64_t, void*> pack = {
        {kQ, const_cast<bf16*>(qkv)},    {kK, const_cast<bf16*>(qkv + C)},     {kV, const_cast<bf16*>(qkv + 2 * C)},
        {kO, const_cast<bf16*>(out)},    {kDO, const_cast<bf16*>(dout)},       {kStats, const_cast<float*>(stats)},
        {kDQ, dqkv},                     {kDK, dqkv + C},                      {kDV, dqkv + 2 * C}};
    check(p.backward->execute(handle_, pack, workspace), "backward");
  }

 private:
  struct Plans {
    Graph forward, backward;
    std::size_t workspace = 0;
  };
  const Plans& plans(const Shape& s) {
    if (const auto found = plans_.find(s); found != plans_.end()) return found->second;
    Plans p{forward_graph(s, handle_), backward_graph(s, handle_), 0};
    p.workspace = std::size_t(std::max(workspace_of(p.forward), workspace_of(p.backward)));
    return plans_.emplace(s, std::move(p)).first->second;
  }

  cudnnHandle_t handle_ = nullptr;
  std::map<Shape, Plans> plans_;
  std::map<Shape, std::string> unsupported_;
};

}  // namespace

std::unique_ptr<FusedAttention> make_cudnn_attention(cudaStream_t stream) {
  return std::make_unique<CudnnAttention>(stream);
}

}  // namespace dptrain::cuda
