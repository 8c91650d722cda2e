// CUDA on the CPU, for testing kernels/ in CI without a GPU: the subset of CUDA C++ the kernels may use, compiled
// by g++. A launch runs the grid's blocks one after another. A block's threads are fibers (ucontext) on the calling
// thread, switched at __syncthreads and at warp shuffles: cheap enough to run a whole model's kernels in a test.
// Built with -DDPTRAIN_CUDA_ON_CPU_THREADS they are real std::threads instead, __syncthreads a std::barrier, so
// that ThreadSanitizer sees races between them (the NAME_threads_test builds of tests/kernels/CMakeLists.txt).
// What it allows (docs/cuda.md, "Kernels, checked on the CPU"): __global__/__device__ functions (__launch_bounds__, a
// hint to nvcc's register allocation, means nothing here), blockIdx, threadIdx, blockDim, gridDim, static __shared__
// arrays (one block runs at a time, so a static variable is the block's shared memory), one dynamic shared buffer per
// block (DPTRAIN_DYNAMIC_SHARED in kernels/common.cuh, sized by the launch), __syncthreads reached by every thread,
// full-mask __shfl_xor_sync/__shfl_down_sync within warps of 32 (blockDim.x a multiple of 32), 16-byte accesses
// through kernels/vectorized.cuh (their alignment checked), and launch<<<>>> through `launch(kernel, grid, block,
// args...)`. Not allowed: warp-synchronous code without a shuffle, inline PTX, tensor cores, spinning on other
// blocks' flags.
#pragma once
#ifdef __CUDACC__
#error "cuda_on_cpu.hpp is for g++ builds of the kernels; nvcc has the real thing"
#endif
#define DPTRAIN_CUDA_ON_CPU 1

#include <ucontext.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace cuda_on_cpu {

inline constexpr unsigned kWarpSize = 32;

// ---- fibers: the threads of one block, taking turns on the calling thread ---------------------------------------
struct Fibers {
  static constexpr std::size_t kStackBytes = 64 << 10;
  ucontext_t scheduler;
  std::vector<ucontext_t> contexts;
  std::vector<std::unique_ptr<char[]>> stacks;  // kept for the next launch
  std::vector<bool> done;
  unsigned current = 0;
  std::function<void(unsigned)> body;  // runs fiber t's thread of the kernel
};
inline thread_local Fibers fibers;

inline void fiber_yield() { swapcontext(&fibers.contexts[fibers.current], &fibers.scheduler); }

inline void fiber_main() {
  fibers.body(fibers.current);
  fibers.done[fibers.current] = true;
}  // returns to uc_link: the scheduler

// A meeting point of `participants` fibers: each arrives, and all go on once the last has arrived.
class FiberBarrier {
 public:
  explicit FiberBarrier(unsigned participants) : participants_(participants) {}
  void arrive_and_wait() {
    const unsigned generation = generation_;
    if (++arrived_ == participants_) {
      arrived_ = 0;
      ++generation_;
      return;
    }
    while (generation_ == generation) fiber_yield();
  }

 private:
  unsigned participants_, arrived_ = 0, generation_ = 0;
};

#ifdef DPTRAIN_CUDA_ON_CPU_THREADS
using Meeting = std::barrier<>;
#else
using Meeting = FiberBarrier;
#endif

// One warp's exchange slots for shuffles: each lane writes its value, the warp meets, each lane reads its partner's.
struct Warp {
  explicit Warp(unsigned lanes) : meet(lanes), slots(lanes) {}
  Meeting meet;
  std::vector<double> slots;  // wide enough for float and int
};

struct Block {
  // The dynamic shared memory starts as all-ones bytes (a NaN in every float, −1 in every int): a kernel that reads
  // a slot it never wrote sees garbage here too, not the zeros that would pass for an initialised sum.
  Block(unsigned threads, std::size_t shared_bytes) : sync(threads), shared((shared_bytes + 15) / 16, kGarbage) {
    for (unsigned w = 0; w < threads / kWarpSize; ++w) warps.push_back(std::make_unique<Warp>(kWarpSize));
  }
  Meeting sync;
  std::vector<std::unique_ptr<Warp>> warps;
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  static constexpr Chunk kGarbage = {
      {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
  std::vector<Chunk> shared;  // the dynamic shared memory, uninitialised as on the GPU (here: garbage, see above)
};

struct ThreadState {
  dim3 block_idx, thread_idx, block_dim, grid_dim;
  Block* block = nullptr;
};
inline thread_local ThreadState self;

template <typename T>
T shuffle(T value, unsigned source_lane) {
  static_assert(sizeof(T) <= sizeof(double));
  Warp& warp = *self.block->warps[self.thread_idx.x / kWarpSize];
  const unsigned lane = self.thread_idx.x % kWarpSize;
  double slot = 0;
  std::memcpy(&slot, &value, sizeof(T));
  warp.slots[lane] = slot;
  warp.meet.arrive_and_wait();
  T result;
  const double read = warp.slots[source_lane % kWarpSize];
  std::memcpy(&result, &read, sizeof(T));
  warp.meet.arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return result;
}

template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(self.block->shared.data());
}

// 16-byte accesses (kernels/vectorized.cuh): each reports its address here. One at an address not a multiple of 16,
// which a GPU faults on (cudaErrorMisalignedAddress), fails the launch it is in once the kernel has run; the count
// tells a test that a kernel took its vectorised path.
inline std::atomic<std::size_t> vector_accesses{0};
inline std::atomic<bool> misaligned_access{false};
inline void vector_access(const void* p) {
  vector_accesses.fetch_add(1, std::memory_order_relaxed);
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) misaligned_access.store(true, std::memory_order_relaxed);
}

// What a GPU of compute capability 9.0 refuses at launch (cudaErrorInvalidConfiguration), empty where it would
// launch: no block or thread at all, more than 1024 threads a block (x, y ≤ 1024, z ≤ 64), a grid beyond 2³¹−1 ×
// 65535 × 65535, or more than 48 KiB of dynamic shared memory (the limit without
// cudaFuncAttributeMaxDynamicSharedMemorySize, which no kernel of kernels/ sets). Every launch of the harness
// checks it, so a shape the CPU runs but a GPU would refuse fails in CI.
inline constexpr std::size_t kMaxDynamicSharedBytes = 48 << 10;
inline std::string launch_problem(dim3 grid, dim3 block, std::size_t shared_bytes) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return "an empty grid";
  if (threads == 0) return "an empty block";
  if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) return "more than 1024 threads a block";
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) return "a grid beyond 2^31-1 x 65535 x 65535";
  if (shared_bytes > kMaxDynamicSharedBytes) return "more than 48 KiB of dynamic shared memory";
  return "";
}

// Runs kernel<<<grid, block, shared_bytes>>>(args...) to completion. Only the x dimensions are used so far.
template <typename Kernel, typename... Args>
void launch_shared(Kernel kernel, dim3 grid, dim3 block, std::size_t shared_bytes, Args... args) {
  if (const std::string problem = launch_problem(grid, block, shared_bytes); !problem.empty())
    throw std::invalid_argument("cuda_on_cpu: a GPU would refuse this launch: " + problem);
  const unsigned threads = block.x * block.y * block.z;
  if (block.y != 1 || block.z != 1 || threads % kWarpSize != 0)
    throw std::invalid_argument("cuda_on_cpu: blocks must be 1-D with a multiple of 32 threads");
  const unsigned blocks = grid.x * grid.y * grid.z;
  auto where = [&](unsigned b, unsigned t, Block* state) {
    return ThreadState{dim3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)), dim3(t), block, grid, state};
  };
#ifndef DPTRAIN_CUDA_ON_CPU_THREADS
  // Block by block, its threads as fibers taking turns until every one has returned (blocks never overlap, so
  // static __shared__ variables are the running block's).
  Fibers& f = fibers;
  while (f.stacks.size() < threads) f.stacks.push_back(std::make_unique<char[]>(Fibers::kStackBytes));
  f.contexts.resize(threads);
  for (unsigned b = 0; b < blocks; ++b) {
    Block state(threads, shared_bytes);
    f.body = [&](unsigned t) {
      self = where(b, t, &state);
      kernel(args...);
    };
    f.done.assign(threads, false);
    for (unsigned t = 0; t < threads; ++t) {
      getcontext(&f.contexts[t]);
      f.contexts[t].uc_stack.ss_sp = f.stacks[t].get();
      f.contexts[t].uc_stack.ss_size = Fibers::kStackBytes;
      f.contexts[t].uc_link = &f.scheduler;
      makecontext(&f.contexts[t], fiber_main, 0);
    }
    for (unsigned running = threads; running > 0;) {
      running = 0;
      for (unsigned t = 0; t < threads; ++t) {
        if (f.done[t]) continue;
        f.current = t;
        self = where(b, t, &state);
        swapcontext(&f.scheduler, &f.contexts[t]);
        running += f.done[t] ? 0 : 1;
      }
    }
  }
#else
  // One team of threads walks the blocks, meeting between blocks: a block starts once every thread of the one
  // before has finished (blocks never overlap, so static __shared__ variables are the running block's). The walk
  // goes from the last block to the first, the fibers' from the first to the last: a kernel whose blocks read what
  // other blocks of the launch write (a race on a GPU, where blocks run in any order) gives other results in one
  // of the two builds, which the same tests then fail.
  Block state(threads, shared_bytes);
  std::barrier<> between_blocks(threads);
  std::vector<std::thread> team;
  team.reserve(threads);
  for (unsigned t = 0; t < threads; ++t)
    team.emplace_back([&, t] {
      for (unsigned b = blocks; b-- > 0;) {
        self = where(b, t, &state);
        kernel(args...);
        between_blocks.arrive_and_wait();
      }
    });
  for (std::thread& thread : team) thread.join();
#endif
  if (misaligned_access.exchange(false))
    throw std::logic_error("cuda_on_cpu: a 16-byte access at an address not a multiple of 16 (a GPU faults on it)");
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, dim3 block, Args... args) {
  launch_shared(kernel, grid, block, 0, args...);
}

// With a kernel file's launch description (kernels::Launch).
template <typename Kernel, typename LaunchT, typename... Args>
  requires requires(LaunchT l) { l.shared_bytes; }
void launch(Kernel kernel, const LaunchT& l, Args... args) {
  launch_shared(kernel, l.grid, l.block, l.shared_bytes, args...);
}

}  // namespace cuda_on_cpu

#define blockIdx (cuda_on_cpu::self.block_idx)
#define threadIdx (cuda_on_cpu::self.thread_idx)
#define blockDim (cuda_on_cpu::self.block_dim)
#define gridDim (cuda_on_cpu::self.grid_dim)

inline void __syncthreads() { cuda_on_cpu::self.block->sync.arrive_and_wait(); }
template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  return cuda_on_cpu::shuffle(value, (threadIdx.x % cuda_on_cpu::kWarpSize) ^ unsigned(lane_mask));
}
template <typename T>
T __shfl_down_sync(unsigned, T value, unsigned delta) {
  // Lanes past the warp's end read their own value, as on the GPU.
  const unsigned lane = threadIdx.x % cuda_on_cpu::kWarpSize;
  return cuda_on_cpu::shuffle(value, lane + delta < cuda_on_cpu::kWarpSize ? lane + delta : lane);
}
// No rsqrtf or other approximate intrinsics: on the GPU they differ from the host functions by ulps, so a kernel
// uses the IEEE ones (1.0f / sqrtf), which the harness computes the same.
