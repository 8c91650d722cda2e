// What the collectives need on top of DType (core/dtype.hpp: bf16/f32, element_size, dtype_name): parsing a dtype
// flag, and the reduce-add a reduction applies at every hop (host_reduce_add from core/reduce_add.hpp by default).
#pragma once
#include <cstddef>
#include <functional>
#include <string_view>

#include "dptrain/core/dtype.hpp"
#include "dptrain/core/reduce_add.hpp"

namespace dptrain {

// Throws UserError "<flag>: unknown dtype 'x' (expected bf16 or fp32)".
DType parse_dtype(std::string_view name, std::string_view flag = "--grad-dtype");

// accumulate[i] += incoming[i] for i < count. A callback so the same collective code can reduce on the host
// (host_reduce_add), with a compute Backend's reduce_add, or (later) with a device kernel; the collectives never
// touch element values.
using ReduceAdd = std::function<void(void* accumulate, const void* incoming, std::size_t count, DType dtype)>;

}  // namespace dptrain
