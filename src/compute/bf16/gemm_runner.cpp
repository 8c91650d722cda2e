// Finding a plan's operands among the tensors a caller named.
#include "gemm_runner.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace dptrain {

const void* gemm_tensor(std::initializer_list<GemmTensor> tensors, GemmOperand role) {
  for (const GemmTensor& t : tensors)
    if (t.role == role) return t.data;
  throw std::logic_error(fmt::format("GEMM: no '{}' tensor given for the plan", operand_name(role)));
}

}  // namespace dptrain
