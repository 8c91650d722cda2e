// The host reduce-add: accumulate[i] += incoming[i] with fp32 arithmetic, stored in the element type. Used by the
// collectives at every hop of a reduction on host memory (and by the CPU compute backend), so every place that
// adds gradients on the host rounds the same way.
#pragma once
#include <cstddef>

#include "dptrain/core/dtype.hpp"

namespace dptrain {

// accumulate[i] += incoming[i] for i < count (both arrays of `count` elements of dtype, not overlapping). For BF16
// every call rounds once, acc = to_bf16(to_float(acc) + to_float(in)) (nearest, ties to even, NaN kept quiet),
// which is exactly what NCCL does per hop of a ring; fp32 is a plain fp32 add.
void host_reduce_add(void* accumulate, const void* incoming, std::size_t count, DType dtype);

}  // namespace dptrain
