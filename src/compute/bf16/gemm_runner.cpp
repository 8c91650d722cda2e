// Finding a plan's operands among the tensors a caller named, and checking its bias.
#include "gemm_runner.hpp"

#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

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

}  // namespace dptrain
