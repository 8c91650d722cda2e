// The launch shapes of kernels/ against what a GPU accepts. The harness (cuda_on_cpu.hpp) checks every launch
// against the limits of compute capability 9.0 (launch_problem); here, first, that it refuses what a GPU refuses,
// and then every launch function of kernels/ at the largest shapes the product trains — far too large to run on
// the harness, so only the shapes are checked: gpt2-124m at Q = 1024 and micro-batch 64 (N = 65,536 rows), and a
// GPT-2 XL-sized model (C = 1600, 25 heads, 1.56·10⁹ parameters) at micro-batch 128.
// clang-format off
#include "cuda_on_cpu.hpp"  // first: it defines what the kernel headers need of CUDA
// clang-format on

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "../../kernels/attention.cuh"
#include "../../kernels/classifier.cuh"
#include "../../kernels/elementwise.cuh"
#include "../../kernels/encoder.cuh"
#include "../../kernels/layernorm.cuh"
#include "../../kernels/optimizer.cuh"
#include "../../kernels/reductions.cuh"

namespace dptrain {
namespace {

__global__ void count_blocks(int* count) {
  if (threadIdx.x == 0) ++*count;
}

TEST(LaunchLimits, TheHarnessRefusesWhatAGpuRefuses) {
  int blocks = 0;
  cuda_on_cpu::launch_shared(count_blocks, dim3(3), dim3(1024), cuda_on_cpu::kMaxDynamicSharedBytes, &blocks);
  EXPECT_EQ(blocks, 3);  // the largest block and the most dynamic shared memory a GPU takes without opting in
  EXPECT_THROW(cuda_on_cpu::launch(count_blocks, dim3(1), dim3(1056), &blocks), std::invalid_argument);
  EXPECT_THROW(cuda_on_cpu::launch(count_blocks, dim3(0), dim3(32), &blocks), std::invalid_argument);
  EXPECT_THROW(
      cuda_on_cpu::launch_shared(count_blocks, dim3(1), dim3(32), cuda_on_cpu::kMaxDynamicSharedBytes + 16, &blocks),
      std::invalid_argument);
  EXPECT_EQ(blocks, 3);  // nothing ran
  EXPECT_EQ(cuda_on_cpu::launch_problem(dim3(1, 65536), dim3(32), 0), "a grid beyond 2^31-1 x 65535 x 65535");
  EXPECT_EQ(cuda_on_cpu::launch_problem(dim3(1), dim3(32, 1, 65), 0), "more than 1024 threads a block");
}

struct Shape {
  const char* name;
  std::size_t B, T, C, NH, V, parameters;
};

TEST(LaunchLimits, EveryLaunchOfKernelsFitsAGpuAtTheLargestShapes) {
  for (const Shape& s : {Shape{"gpt2-124m, B 64", 64, 1024, 768, 12, 50257, 124'439'808},
                         Shape{"1.56e9 parameters, B 128", 128, 1024, 1600, 25, 50257, 1'557'611'200},
                         Shape{"one token", 1, 1, 1, 1, 1, 1}}) {
    const std::size_t N = s.B * s.T, heads = s.B * s.NH;
    const std::pair<const char*, kernels::Launch> launches[] = {
        {"elementwise, the widest activation", kernels::vectorized_launch(N * 4 * s.C)},
        {"elementwise, every parameter", kernels::vectorized_launch(s.parameters)},
        {"adamw", kernels::adamw_launch(s.parameters)},
        {"embedding_forward", kernels::embedding_forward_launch(N, s.C)},
        {"embedding_backward_wte", kernels::embedding_backward_wte_launch(N, s.C)},
        {"embedding_backward_wpe", kernels::embedding_backward_wpe_launch(s.T, s.C)},
        {"layernorm_forward", kernels::layernorm_forward_launch(N)},
        {"layernorm_backward", kernels::layernorm_backward_launch(N, s.C)},
        {"sum_partials, LayerNorm", kernels::sum_partials_launch(2 * s.C)},
        {"sum_partials, the widest bias", kernels::sum_partials_launch(4 * s.C)},
        {"bias_backward, the widest bias", kernels::bias_backward_launch(N, 4 * s.C)},
        {"sum_squares", kernels::sum_squares_launch(s.parameters)},
        {"sum_squares_finish", kernels::sum_squares_finish_launch()},
        {"attention permutes", kernels::attention_permute_launch(s.B, s.T, s.C)},
        {"causal softmax", kernels::causal_softmax_launch(heads, s.T)},
        {"classifier", kernels::classifier_launch(N)},
        {"loss_sum", kernels::loss_sum_launch()},
    };
    for (const auto& [kernel, l] : launches)
      EXPECT_EQ(cuda_on_cpu::launch_problem(l.grid, l.block, l.shared_bytes), "") << s.name << ": " << kernel;
    // The LayerNorm backward's shared memory peaks at the widest row it takes in one pass.
    EXPECT_EQ(cuda_on_cpu::launch_problem(
                  kernels::layernorm_backward_launch(N, kernels::kLayerNormOnePassMaxC).grid,
                  kernels::layernorm_backward_launch(N, kernels::kLayerNormOnePassMaxC).block,
                  kernels::layernorm_backward_launch(N, kernels::kLayerNormOnePassMaxC).shared_bytes),
              "")
        << s.name;
    // The row-per-block and row-per-warp launches cover every row (their grids are not capped and strided).
    EXPECT_EQ(kernels::classifier_launch(N).grid.x, N) << s.name;
    EXPECT_GE(std::size_t(kernels::layernorm_forward_launch(N).grid.x) * kernels::kLayerNormWarpsPerBlock, N);
    EXPECT_GE(std::size_t(kernels::causal_softmax_launch(heads, s.T).grid.x) * kernels::kSoftmaxWarpsPerBlock,
              heads * s.T);
  }
}

}  // namespace
}  // namespace dptrain
