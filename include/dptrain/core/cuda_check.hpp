// Checked CUDA runtime calls (only in builds with CUDA): a failing call throws with the call's text, the runtime's
// message and where. A failure inside the step is an internal error (the job ends on every rank); running out of
// device memory is std::bad_alloc, which the programs report with the memory estimate like a failed host allocation.
#pragma once
#include <cuda_runtime_api.h>

namespace dptrain::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);

inline void check(cudaError_t error, const char* call, const char* file, int line) {
  if (error != cudaSuccess) throw_cuda_error(error, call, file, line);
}

}  // namespace dptrain::cuda

#define DP_CUDA(call) ::dptrain::cuda::check((call), #call, __FILE__, __LINE__)
