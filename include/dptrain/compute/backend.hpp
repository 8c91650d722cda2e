// The compute Backend: every operation the GPT model needs, forward and backward, plus AdamW, casts, the ring's
// reduce-add and the squared norm, on the memory of its Device. N = rows (windows × positions), C = channels,
// OC = output channels; shapes are row-major.
//
// Every pointer is device memory. Three kinds of arrays:
//   activations  in activation_dtype() (fp32 on cpu; BF16 on a GPU), `void*` below;
//   weights      the "compute weights" a view made by acquire_weights() gives (a BF16 backend reads the BF16
//                weights where they are; the cpu one multiplies fp32 and expands them into a mirror it keeps);
//   gradients    parameter gradients accumulate (+=) in gradient_dtype() (fp32 on cpu).
// Activation gradients: matmul, attention and GELU backward write theirs (=, the array's old contents are not read,
// so it needs no clearing); LayerNorm backward adds (+=) into the residual stream's, the one that sums terms.
// LayerNorm statistics and per-position losses are fp32, tokens int32, the step's accumulators double.
// No operation returns a value to the host: the loss sum and the squared gradient norm are added into device
// accumulators that the caller reads once per step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/compute/device.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/dtype.hpp"
#include "dptrain/model/config.hpp"

namespace dptrain {

struct AdamWParams {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
  int step = 1;             // 1-based, for bias correction
  float grad_scale = 1.0f;  // multiplies every gradient first (clipping)
};

// What a backend promises about the bits it computes; tests check the bitwise claims only where promised.
struct BackendGuarantees {
  bool repeatable = false;             // the same inputs give the same bits, run after run
  bool micro_batch_invariant = false;  // a window's gradient terms do not depend on the other windows of a batch
  bool row_length_invariant = false;   // a product's bits do not depend on its operands' row lengths (ld)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device& device() = 0;
  virtual DType activation_dtype() const = 0;
  virtual DType weight_dtype() const = 0;  // of the compute weights (acquire_weights)
  virtual DType gradient_dtype() const = 0;
  virtual BackendGuarantees guarantees() const = 0;
  // The best FLOP/s of a large square GEMM in the backend's matmul precision (fp32 sgemm on cpu, BF16 cuBLASLt on
  // a GPU), measured now: MFU's peak where the device's datasheet figure is not known.
  virtual double measure_gemm_flops() = 0;

  // ---- compute weights --------------------------------------------------------------------------------------
  // Room for `views` live views of up to `elements` weights each, reserved once (no allocation in the step), while
  // no view is live.
  virtual void reserve_weight_views(std::size_t elements, int views) = 0;
  // The BF16 weights w[n] as the operations read them: an array of n elements of weight_dtype(), element i being
  // w[i] (exactly: BF16 values are fp32 values); valid until released, `w` unchanged meanwhile. Throws
  // std::logic_error when every reserved view is live, and release_weights when given a pointer it did not hand out.
  virtual const void* acquire_weights(const bf16* w, std::size_t n) = 0;
  virtual void release_weights(const void* view) = 0;
  // Bytes the views occupy (the cpu backend's fp32 mirror; 0 where the weights are read in place).
  virtual std::size_t weight_view_bytes() const = 0;

  // ---- scratch ----------------------------------------------------------------------------------------------
  // Room for the scratch every operation needs on up to `rows` positions (windows·T) of `config`, allocated now, so
  // that no step allocates (the model calls it when it lays out its activations). A backend whose operations need
  // no device scratch ignores it.
  virtual void reserve_scratch(const ModelConfig& config, std::size_t rows) {}
  virtual std::size_t scratch_bytes() const { return 0; }

  // ---- the model's operations -------------------------------------------------------------------------------
  // out[N,C] = wte[token] + wpe[position]; tokens [N] with N = windows·T, position = row % T.
  virtual void embedding_forward(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                                 std::size_t N, std::size_t T, std::size_t C) = 0;
  // dwte[V,C] += scatter of dout by token; dwpe[T,C] += dout summed over windows.
  virtual void embedding_backward(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, std::size_t N,
                                  std::size_t T, std::size_t C) = 0;

  // out[N,C] = (in − mean)·rstd·w + b; mean, rstd [N] saved for backward. eps 1e-5.
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* in, const void* w, const void* b,
                                 std::size_t N, std::size_t C) = 0;
  // din[N,C] += ∂/∂in; dw[C], db[C] += their gradients.
  virtual void layernorm_backward(void* din, void* dw, void* db, const void* dout, const void* in, const void* w,
                                  const float* mean, const float* rstd, std::size_t N, std::size_t C) = 0;

  // out[N,OC] = in[N,C] · w[OC,C]ᵀ + bias[OC] (bias may be null). out's rows are ld_out ≥ OC elements apart (the
  // LM head's logits are padded to an aligned row length); the columns past OC are left as they are.
  virtual void matmul_forward(void* out, const void* in, const void* w, const void* bias, std::size_t N,
                              std::size_t T, std::size_t C, std::size_t OC, std::size_t ld_out) = 0;
  // din[N,C] = dout·w (din may be null); dw[OC,C] += doutᵀ·in; dbias[OC] += Σ_rows dout (dbias may be null).
  // dout's rows are ld_out ≥ OC elements apart; its columns past OC are not read.
  //
  // Both work window by window (T rows at a time, N a multiple of T), and the parameter gradients are summed into
  // dw and dbias in window order: a window's rows get the same bits whatever else is in the batch (a GEMM library
  // may pick another kernel for another row count), so a batch split into micro-batches gets bitwise the same
  // gradient as the batch in one piece (where guarantees().micro_batch_invariant).
  virtual void matmul_backward(void* din, void* dw, void* dbias, const void* dout, const void* in, const void* w,
                               std::size_t N, std::size_t T, std::size_t C, std::size_t OC, std::size_t ld_out) = 0;
  // Causal multi-head attention. qkv[B,T,3C] (q | k | v, heads of C/NH contiguous in each), out[B,T,C].
  // `saved` is what forward keeps for backward, B·NH·attention_saved_bytes(T, C, NH) bytes: the probabilities
  // [B,NH,T,T] in activation_dtype() where the scores are multiplied out (gemm), or the rows' softmax statistics
  // [B,NH,T] fp32 of a fused attention. Backward: dqkv = ∂/∂qkv, from dout and the forward's qkv, out and saved.
  virtual void attention_forward(void* out, void* saved, const void* qkv, std::size_t B, std::size_t T, std::size_t C,
                                 std::size_t NH) = 0;
  virtual void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const void* saved,
                                  std::size_t B, std::size_t T, std::size_t C, std::size_t NH) = 0;
  // Bytes attention saves per window and head for backward, for heads of this shape. UserError where the backend
  // was told to fuse attention and cannot for this shape.
  virtual std::size_t attention_saved_bytes(std::size_t T, std::size_t C, std::size_t NH) const {
    return T * T * element_size(activation_dtype());
  }
  // How attention is computed for the model reserve_scratch was last given: "gemm" (products and a softmax, the
  // [T,T] probabilities saved; "gemm (why)" where --attention auto found the fused attention refusing the heads),
  // or "fused (...)" naming the library.
  virtual std::string attention_name() const { return "gemm"; }

  // Tanh-approximate GELU, elementwise over n. Backward: din = dout·gelu'(in); din may be dout (in place).
  virtual void gelu_forward(void* out, const void* in, std::size_t n) = 0;
  virtual void gelu_backward(void* din, const void* in, const void* dout, std::size_t n) = 0;

  // The MLP's first product and its GELU: pre[N,OC] = in[N,C]·w[OC,C]ᵀ + bias[OC], out[N,OC] = gelu(pre). Here
  // matmul_forward, then gelu_forward; a backend may fuse them (fuses_matmul_epilogues), taking gelu of pre's value
  // before it is rounded to the activation dtype.
  virtual void matmul_gelu_forward(void* out, void* pre, const void* in, const void* w, const void* bias,
                                   std::size_t N, std::size_t T, std::size_t C, std::size_t OC) {
    matmul_forward(pre, in, w, bias, N, T, C, OC, OC);
    gelu_forward(out, pre, N * OC);
  }
  // The backward of the MLP's second product, out[N,OC] = gelu(pre)[N,C]·w[OC,C]ᵀ + bias: dpre[N,C] =
  // (dout·w)·gelu'(pre); dw, dbias as matmul_backward with in = gelu(pre) (matmul_gelu_forward's out). Here
  // matmul_backward writing its din into dpre, then gelu_backward in place; a backend may fuse them, taking
  // gelu' times dout·w before it is rounded.
  virtual void gelu_matmul_backward(void* dpre, void* dw, void* dbias, const void* dout, const void* in,
                                    const void* w, const void* pre, std::size_t N, std::size_t T, std::size_t C,
                                    std::size_t OC) {
    matmul_backward(dpre, dw, dbias, dout, in, w, N, T, C, OC, OC);
    gelu_backward(dpre, pre, dpre, N * C);
  }
  // A projection onto the residual stream: out[N,OC] = residual[N,OC] + in[N,C]·w[OC,C]ᵀ + bias[OC] (out ≠
  // residual). Here matmul_forward, then accumulate; a backend may fuse them, rounding the sum once.
  virtual void matmul_residual_forward(void* out, const void* residual, const void* in, const void* w,
                                       const void* bias, std::size_t N, std::size_t T, std::size_t C,
                                       std::size_t OC) {
    matmul_forward(out, in, w, bias, N, T, C, OC, OC);
    accumulate(out, residual, N * OC, activation_dtype());
  }
  // Whether the three above are one operation here (the GELU or the residual in the product's epilogue) rather
  // than the composition, and in words what ran so far: "composed", or what was fused and which shapes were not.
  virtual bool fuses_matmul_epilogues() const { return false; }
  virtual std::string matmul_epilogues() const { return "composed"; }

  // out[n] += a[n], both in `dtype` (activations: the residual branch's backward; gradients: folding a term in).
  virtual void accumulate(void* out, const void* a, std::size_t n, DType dtype) = 0;

  // The classifier's loss and, in the same pass, the logits' gradient: losses[N] = −log p[target] for p the softmax
  // of each row, *loss_sum += Σ losses (in row order, in double). Where dloss ≠ 0 (a training step) the logits
  // become dloss·(p − onehot(target)) in place, the gradient backward starts from (a backend that holds them in BF16
  // computes the target's p − 1 as expm1(−loss) in fp32: a rounded p near 1 would lose it); where dloss = 0
  // (evaluation) what the logits hold afterwards is the backend's own. Rows are ld ≥ V elements apart; the columns
  // past V are neither read nor written.
  virtual void softmax_cross_entropy(void* logits, float* losses, const std::int32_t* targets, std::size_t N,
                                     std::size_t V, std::size_t ld, float dloss, double* loss_sum) = 0;

  // ---- gradients and the optimizer --------------------------------------------------------------------------
  // out[n] (to) = in[n] (from): a copy when the types agree, else fp32 → BF16 by round-to-nearest-even or
  // BF16 → fp32 exactly.
  virtual void cast(const void* in, DType from, void* out, DType to, std::size_t n) = 0;
  // acc[n] += incoming[n] in `dtype`, adding in fp32 and storing in dtype: one hop of a ring.
  virtual void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) = 0;
  // *acc += Σ g² (double) over grad[n]: for the global norm.
  virtual void sum_of_squares(const void* grad, std::size_t n, DType dtype, double* acc) = 0;
  // One AdamW step on n parameters of one tensor (or a slice of it): master/m/v fp32, grad in dtype, then
  // weights (BF16) = round(master). Decoupled weight decay p.weight_decay (0 for biases and norms).
  virtual void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype, std::size_t n,
                     const AdamWParams& p) = 0;
};

// Where a rank's backend runs: its rank among the ranks of its node and how many share the node. A GPU backend
// takes GPU gpu() = local_rank / ranks_per_gpu and refuses a node with more ranks than GPUs × ranks_per_gpu.
// ranks_per_gpu is 1 but for tests of several ranks on one GPU (placement_from_environment()).
struct Placement {
  int local_rank = 0;
  int local_size = 1;
  int ranks_per_gpu = 1;
  int gpu() const { return local_rank / ranks_per_gpu; }
};

// A placement with ranks_per_gpu from DPTRAIN_RANKS_PER_GPU (unset: 1; UserError unless a whole number ≥ 1).
Placement placement_from_environment(int local_rank, int local_size);

// The backends this build has ("cpu", and "cuda" where built with it).
std::vector<std::string> backend_names();
// Why backend `name` cannot run here with this placement (an unknown name, a build without it, no driver, no GPU,
// fewer GPUs than ranks on the node), as one line naming what was found and what is accepted; empty if it can.
std::string backend_unavailable(std::string_view name, Placement placement = {});
// --device auto: "cuda" where the build has it and a GPU is visible, else "cpu".
std::string auto_backend_name();
// --attention: "gemm" (the score products multiplied out, on every backend), "fused" (cuDNN's flash attention, on
// the cuda backend of a build with cuDNN), "auto" (fused where the GPU's cuDNN supports the shape, else gemm).
inline constexpr std::string_view kAttentionModes[] = {"auto", "gemm", "fused"};
// "--attention: unknown mode ..." where `mode` is none of kAttentionModes, else empty.
std::string unknown_attention_mode(std::string_view mode);
// Why --attention `mode` cannot run on backend `name` in this build (one line), empty if it can; "fused" may still
// be refused by the GPU's cuDNN when the model is laid out (UserError then).
std::string attention_unavailable(std::string_view name, std::string_view mode);

// A backend by name; UserError with backend_unavailable()'s line where it cannot run. cpu_gemm: the cpu backend's
// sgemm library (cpu_gemm.hpp; OpenBLAS where null), ignored by the others. attention: one of kAttentionModes
// (UserError with attention_unavailable()'s line where it cannot run). fuse_epilogues: GELU and the residual adds in
// the GEMMs' epilogues where the backend can (the cuda backend; Backend::fuses_matmul_epilogues), else composed.
std::unique_ptr<Backend> make_backend(std::string_view name, Placement placement = {},
                                      std::shared_ptr<const CpuGemm> cpu_gemm = nullptr,
                                      std::string_view attention = "auto", bool fuse_epilogues = true);
// The cpu backend multiplies with whatever `*gemm` holds at each call: its owner may change the library before the
// first operation (--cpu-gemm auto decides once the ranks can time it together), never after.
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const CpuGemm> gemm);
std::unique_ptr<Backend> make_cpu_backend(std::string_view gemm = "openblas");
#ifdef DPTRAIN_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int gpu, std::string_view attention = "auto",  // src/compute/cuda/
                                           bool fuse_epilogues = true);
std::unique_ptr<Device> make_cuda_device(int gpu);    // the GPU alone (memory, streams, events), made current
int visible_gpu_count(std::string* reason = nullptr);
#endif

}  // namespace dptrain
