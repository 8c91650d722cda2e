// Element types of gradients on the wire and in gradient buffers.
#pragma once
#include <cstddef>
#include <string_view>

namespace dptrain {

enum class DType { bf16, f32 };

constexpr std::size_t element_size(DType dtype) { return dtype == DType::bf16 ? 2 : 4; }
constexpr std::string_view dtype_name(DType dtype) { return dtype == DType::bf16 ? "bf16" : "fp32"; }

}  // namespace dptrain
