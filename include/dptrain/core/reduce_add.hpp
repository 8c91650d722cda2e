// The host reduce-add every reduction on host memory uses (the ring's hops, MPI's BF16 sum, the cpu backend).
#pragma once
#include <cstddef>

#include "dptrain/core/dtype.hpp"

namespace dptrain {

// accumulate[i] += incoming[i] for i < count, adding in fp32 and storing in the dtype. For BF16 every call rounds
// once, acc = to_bf16(to_float(acc) + to_float(in)), which is exactly what NCCL does per hop of a ring.
void host_reduce_add(void* accumulate, const void* incoming, std::size_t count, DType dtype);

}  // namespace dptrain
