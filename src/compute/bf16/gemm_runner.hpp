// GemmRunner: runs GEMM plans (compute/gemm_plan.hpp) on BF16 operands — cuBLASLt on a GPU, a BLAS replay in the
// tests. The caller names its tensors by role; the plan says which is A, which B and which C = D.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "dptrain/compute/gemm_plan.hpp"
#include "dptrain/core/dtype.hpp"
#include "dptrain/core/memory.hpp"

namespace dptrain {

struct GemmTensor {
  GemmOperand role;
  const void* data;  // D's is written
};

// The alignment run() needs of a bias: the allocations' own (Memory::kAlignment). cuBLASLt's bias epilogue reads it
// in wide loads, its alignment preferences do not cover it, and its heuristic reads the pointer of a shape's first
// call: a bias always 256-byte aligned keeps every cached choice valid for the later ones.
constexpr std::size_t kBiasAlignment = Memory::kAlignment;

class GemmRunner {
 public:
  virtual ~GemmRunner() = default;
  // D = plan.alpha·op(A)·op(B) + plan.beta·C (+ bias[m] over the columns where plan.bias_epilogue), C = D or, where
  // plan.residual, the `residual` tensor. A and B are BF16; C and D BF16 or fp32 (d_type); bias BF16 (given iff the
  // plan adds one), kBiasAlignment-aligned. Runs the plan's aligned parts (gemm_aligned_parts) one after another. For
  // plans without an activation (std::logic_error otherwise).
  void run(const GemmPlan& plan, std::initializer_list<GemmTensor> tensors, DType d_type, const void* bias = nullptr);
  // Parts of one plan (causal_row_blocks), each run as its aligned parts, its offsets added to theirs.
  void run(const std::vector<GemmPart>& parts, std::initializer_list<GemmTensor> tensors, DType d_type,
           const void* bias = nullptr);
  // A plan with an activation epilogue (gemm_plan.hpp: GemmActivation; gemm_activation_fusable), D BF16, `pre`
  // among the tensors: true once run; false where the library has no kernel with the activation for one of its
  // parts (having run nothing), or refused one when called (D and pre then partly written): the caller then
  // computes the product and the activation apart, over all of D and pre.
  [[nodiscard]] bool try_run_with_activation(const GemmPlan& plan, std::initializer_list<GemmTensor> tensors,
                                             const void* bias = nullptr);
  // Whether a product's bits are the same whatever its operands' row lengths (ld) and alignment.
  virtual bool row_length_invariant() const = 0;

 protected:
  // One part, its operands' pointers already advanced to it: A and B BF16, C (D itself, or the residual) and D of
  // d_type, bias BF16 or null, pre BF16 where the plan has an activation (else null). False where the library
  // refused a part with an activation when called (then never tried again for its key); true, or an exception,
  // otherwise.
  virtual bool run_part(const GemmPlan& plan, const void* A, const void* B, const void* C, void* D, DType d_type,
                        const void* bias, const void* pre) = 0;
  // Whether run_part has a kernel for this part with its activation (asked of such parts only, before any runs).
  virtual bool has_activation_kernel(const GemmPlan& plan, const void* A, const void* B, const void* C, const void* D,
                                     const void* bias, const void* pre) {
    return true;
  }

 private:
  // A part of the plan as its operands' addresses.
  struct Call {
    GemmPlan plan;
    const void *A, *B, *C;
    void* D;
    const void *bias, *pre;
  };
  static std::vector<Call> calls(const std::vector<GemmPart>& parts, std::initializer_list<GemmTensor> tensors,
                                 DType d_type, const void* bias);
};

// The tensor given for `role` (std::logic_error naming the role where none was).
const void* gemm_tensor(std::initializer_list<GemmTensor> tensors, GemmOperand role);
// std::logic_error unless `bias` is given exactly where the plan adds one, kBiasAlignment-aligned: what every
// GemmRunner::run checks first.
void check_gemm_bias(const GemmPlan& plan, const void* bias);

}  // namespace dptrain
