// The NCCL transport's reduce-add launches (reduce_add_launch.hpp).
#include "dptrain/core/cuda_check.hpp"
#include "elementwise.cuh"
#include "reduce_add_launch.hpp"

namespace dptrain {

void launch_reduce_add(cudaStream_t stream, void* accumulate, const void* incoming, std::size_t count, DType dtype) {
  if (count == 0) return;
  const kernels::Launch l = kernels::vectorized_launch(count);
  if (dtype == DType::bf16) {
    kernels::reduce_add_bf16<<<l.grid, l.block, 0, stream>>>(static_cast<bf16*>(accumulate),
                                                             static_cast<const bf16*>(incoming), count);
  } else {
    kernels::add_f32<<<l.grid, l.block, 0, stream>>>(static_cast<float*>(accumulate),
                                                     static_cast<const float*>(incoming), count);
  }
  DP_CUDA(cudaGetLastError());
}

}  // namespace dptrain
