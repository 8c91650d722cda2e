// The NCCL transport's reduce-add: kernels/'s BF16 reduce-add (fp32 add, one rounding) or fp32 add, enqueued on a
// stream of the current GPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "dptrain/core/dtype.hpp"

namespace dptrain {

// accumulate[i] += incoming[i] for i < count, on `stream`.
void launch_reduce_add(cudaStream_t stream, void* accumulate, const void* incoming, std::size_t count, DType dtype);

}  // namespace dptrain
