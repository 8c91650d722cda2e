// Finding a plan's operands among the tensors a caller named, and checking its bias.
#include "gemm_runner.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

#include "dptrain/core/bf16.hpp"

namespace dptrain {

const void* gemm_tensor(std::initializer_list<GemmTensor> tensors, GemmOperand role) {
  for (const GemmTensor& t : tensors)
    if (t.role == role) return t.data;
  throw std::logic_error(fmt::format("GEMM: no '{}' tensor given for the plan", operand_name(role)));
}

void check_gemm_bias(const GemmPlan& plan, const void* bias) {
  if (plan.bias_epilogue != (bias != nullptr)) throw std::logic_error("GEMM: bias given iff the plan adds one");
  if (reinterpret_cast<std::uintptr_t>(bias) % kBiasAlignment != 0)
    throw std::logic_error(fmt::format("GEMM: a bias not {}-byte aligned (cuBLASLt's epilogue loads it in vectors)",
                                       kBiasAlignment));
}

void GemmRunner::run(const GemmPlan& plan, std::initializer_list<GemmTensor> tensors, DType d_type,
                     const void* bias) {
  check_gemm_bias(plan, bias);
  const auto* A = static_cast<const std::byte*>(gemm_tensor(tensors, plan.a));
  const auto* B = static_cast<const std::byte*>(gemm_tensor(tensors, plan.b));
  auto* D = static_cast<std::byte*>(const_cast<void*>(gemm_tensor(tensors, plan.c)));
  const auto* bias_bytes = static_cast<const std::byte*>(bias);
  constexpr std::size_t kOperandBytes = sizeof(bf16);  // A, B and the bias
  for (const GemmPart& part : gemm_aligned_parts(plan))
    run_part(part.plan, A + part.offset_a * kOperandBytes, B + part.offset_b * kOperandBytes,
             D + part.offset_c * element_size(d_type), d_type,
             part.plan.bias_epilogue ? bias_bytes + part.offset_bias * kOperandBytes : nullptr);
}

}  // namespace dptrain
