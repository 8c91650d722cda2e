// Parsing a dtype flag.
#include "dptrain/comm/dtype.hpp"

#include "dptrain/core/error.hpp"

namespace dptrain {

DType parse_dtype(std::string_view name, std::string_view flag) {
  if (name == "bf16") return DType::bf16;
  if (name == "fp32") return DType::f32;
  fail("{}: unknown dtype '{}' (expected bf16 or fp32)", flag, name);
}

}  // namespace dptrain
