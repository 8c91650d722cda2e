// Finding a plan's operands among the tensors a caller named, checking its bias, and running it as its parts.
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
  run(std::vector<GemmPart>{{plan}}, tensors, d_type, bias);
}

void GemmRunner::run(const std::vector<GemmPart>& parts, std::initializer_list<GemmTensor> tensors, DType d_type,
                     const void* bias) {
  if (!parts.empty() && parts.front().plan.activation != GemmActivation::none)
    throw std::logic_error("GEMM: a plan with an activation goes through try_run_with_activation");
  for (const Call& call : calls(parts, tensors, d_type, bias))
    if (!run_part(call.plan, call.A, call.B, call.C, call.D, d_type, call.bias, call.pre))
      throw std::logic_error("GEMM: a part without an activation was refused");
}

bool GemmRunner::try_run_with_activation(const GemmPlan& plan, std::initializer_list<GemmTensor> tensors,
                                         const void* bias) {
  if (plan.activation == GemmActivation::none || !gemm_activation_fusable(plan))
    throw std::logic_error("GEMM: try_run_with_activation takes a plan with an activation it can fuse");
  const std::vector<Call> all = calls(std::vector<GemmPart>{{plan}}, tensors, DType::bf16, bias);
  for (const Call& call : all)
    if (!has_activation_kernel(call.plan, call.A, call.B, call.C, call.D, call.bias, call.pre)) return false;
  for (const Call& call : all)
    if (!run_part(call.plan, call.A, call.B, call.C, call.D, DType::bf16, call.bias, call.pre)) return false;
  return true;
}

std::vector<GemmRunner::Call> GemmRunner::calls(const std::vector<GemmPart>& parts,
                                                std::initializer_list<GemmTensor> tensors, DType d_type,
                                                const void* bias) {
  if (parts.empty()) throw std::logic_error("GEMM: no part to run");
  const GemmPlan& plan = parts.front().plan;  // the parts share the operands' roles, the bias and the activation
  check_gemm_bias(plan, bias);
  const auto* A = static_cast<const std::byte*>(gemm_tensor(tensors, plan.a));
  const auto* B = static_cast<const std::byte*>(gemm_tensor(tensors, plan.b));
  auto* D = static_cast<std::byte*>(const_cast<void*>(gemm_tensor(tensors, plan.c)));
  const auto* pre = plan.activation == GemmActivation::none
                        ? nullptr
                        : static_cast<const std::byte*>(gemm_tensor(tensors, GemmOperand::pre));
  const auto* residual =
      plan.residual ? static_cast<const std::byte*>(gemm_tensor(tensors, GemmOperand::residual)) : nullptr;
  const auto* bias_bytes = static_cast<const std::byte*>(bias);
  constexpr std::size_t kOperandBytes = sizeof(bf16);  // A, B, the bias and pre
  std::vector<Call> all;
  for (const GemmPart& part : parts)
    for (const GemmPart& piece : gemm_aligned_parts(part.plan)) {
      const std::int64_t a = part.offset_a + piece.offset_a, b = part.offset_b + piece.offset_b,
                         c = part.offset_c + piece.offset_c, at_bias = part.offset_bias + piece.offset_bias;
      const std::size_t at_c = std::size_t(c) * element_size(d_type);
      all.push_back({piece.plan, A + a * kOperandBytes, B + b * kOperandBytes,
                     piece.plan.residual ? residual + at_c : D + at_c, D + at_c,
                     piece.plan.bias_epilogue ? bias_bytes + at_bias * kOperandBytes : nullptr,
                     pre ? pre + c * kOperandBytes : nullptr});
    }
  return all;
}

}  // namespace dptrain
