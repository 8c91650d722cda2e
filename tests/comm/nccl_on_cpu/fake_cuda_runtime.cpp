// The part of the CUDA runtime the NCCL transport and dpbench --device cuda call, on the CPU (fake_nccl.hpp says
// why). A stream is a thread
// that runs its queue in order; before each item it pauses a random while (most often a yield, sometimes up to
// 40 µs), so that work queued on two streams interleaves differently from run to run and an item that is not
// ordered after the one whose data it reads finds that data unfinished. Events count their records: an event is
// complete when the item of its latest record has run, and cudaStreamWaitEvent waits for the record that was the
// latest when it was called, as on a GPU. Events and streams are never freed (a stream is drained and its thread
// joined): items still queued may refer to them.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_nccl.hpp"

struct CUstream_st {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  bool running = false;  // an item is running
  bool stopping = false;
  std::thread worker;
};

struct CUevent_st {
  std::mutex mutex;
  std::condition_variable changed;
  unsigned long recorded = 0, completed = 0;  // generations
  std::chrono::steady_clock::time_point at;   // when the latest completed record ran
};

namespace {

void run_stream(CUstream_st* stream, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> pause_us(-120, 40);  // ≤ 0 (three times in four): a yield only
  for (;;) {
    std::function<void()> item;
    {
      std::unique_lock lock(stream->mutex);
      stream->changed.wait(lock, [&] { return stream->stopping || !stream->queue.empty(); });
      if (stream->queue.empty()) return;  // stopping, and drained
      item = std::move(stream->queue.front());
      stream->queue.pop_front();
      stream->running = true;
    }
    const int pause = pause_us(random);
    if (pause > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(pause));
    else
      std::this_thread::yield();
    item();
    {
      const std::lock_guard lock(stream->mutex);
      stream->running = false;
    }
    stream->changed.notify_all();
  }
}

std::mutex streams_mutex;
std::vector<CUstream_st*> streams;  // every stream not destroyed

std::atomic<long> allocations_made{0};  // cudaMalloc and cudaMallocHost calls

// This process's rank in the job as mpirun tells it ("0" alone), for the files below.
std::string job_rank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank != nullptr ? rank : "0";
}

// FAKE_CUDA_DEVICE_BYTES: the device's size (default 16 GiB).
std::size_t device_bytes() {
  static const std::size_t bytes = [] {
    const char* text = std::getenv("FAKE_CUDA_DEVICE_BYTES");
    return text != nullptr ? std::size_t(std::strtoull(text, nullptr, 10)) : std::size_t{16} << 30;
  }();
  return bytes;
}

// FAKE_CUDA_ALLOCATIONS=PATH: at exit, the process writes how many allocations it made to PATH.<rank> (a test
// compares runs of different lengths: the steps after the first allocate nothing).
struct AllocationReport {
  ~AllocationReport() {
    const char* path = std::getenv("FAKE_CUDA_ALLOCATIONS");
    if (path == nullptr) return;
    std::ofstream(std::string(path) + "." + job_rank()) << allocations_made.load() << "\n";
  }
} allocation_report;
std::atomic<std::size_t> allocated_bytes{0};
std::mutex allocations_mutex;
std::map<void*, std::size_t> allocations;

// FAKE_CUDA_SHARED_DEVICE=PATH: the job's ranks share the one device, as processes placed on one GPU do: each
// writes the bytes it holds to PATH.<rank> whenever they change (under allocations_mutex), and a rank's free
// memory and allocations count the other ranks' bytes too.
const char* shared_device() { return std::getenv("FAKE_CUDA_SHARED_DEVICE"); }
void publish_allocated_bytes() {
  if (shared_device() != nullptr)
    std::ofstream(std::string(shared_device()) + "." + job_rank()) << allocated_bytes.load() << "\n";
}
std::size_t other_ranks_bytes() {
  if (shared_device() == nullptr) return 0;
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int ranks = size != nullptr ? std::atoi(size) : 1;
  std::size_t bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    if (std::to_string(r) == job_rank()) continue;
    std::size_t held = 0;
    if (std::ifstream(std::string(shared_device()) + "." + std::to_string(r)) >> held) bytes += held;
  }
  return bytes;
}

unsigned next_seed() {
  static std::atomic<unsigned> streams{0};
  return 1000003u * static_cast<unsigned>(fake_nccl::world_rank()) + streams++;
}

}  // namespace

namespace fake_cuda {

void enqueue(cudaStream_t stream, std::function<void()> item) {
  {
    const std::lock_guard lock(stream->mutex);
    stream->queue.push_back(std::move(item));
  }
  stream->changed.notify_all();
}

void drain(cudaStream_t stream) {
  std::unique_lock lock(stream->mutex);
  stream->changed.wait(lock, [&] { return stream->queue.empty() && !stream->running; });
}

void drain_all() {
  const std::lock_guard registry(streams_mutex);
  for (CUstream_st* stream : streams) drain(stream);
}

}  // namespace fake_cuda

extern "C" {

cudaError_t cudaSetDevice(int) { return cudaSuccess; }

// One device of device_bytes(); memory is the host's, counted against it.
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int) {
  *properties = cudaDeviceProp{};
  std::strcpy(properties->name, "fake GPU on the CPU");
  properties->totalGlobalMem = device_bytes();
  properties->multiProcessorCount = 1;
  return cudaSuccess;
}

// FAKE_CUDA_MEMINFO_DELAY_S: the process's first call answers that many seconds late (a rank that measures the
// memory left after the others); with FAKE_CUDA_SHARED_DEVICE, it writes the bytes this rank held then and the
// other ranks' bytes it counted to PATH.<rank>.seen.
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  static std::once_flag first;
  std::call_once(first, [] {
    if (const char* delay = std::getenv("FAKE_CUDA_MEMINFO_DELAY_S"))
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(delay)));
    if (shared_device() != nullptr)
      std::ofstream(std::string(shared_device()) + "." + job_rank() + ".seen")
          << allocated_bytes.load() << " " << other_ranks_bytes() << "\n";
  });
  *total = device_bytes();
  *free = device_bytes() - std::min(device_bytes(), allocated_bytes.load() + other_ranks_bytes());
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** data, size_t bytes) {
  if (allocated_bytes + other_ranks_bytes() + bytes > device_bytes()) return cudaErrorMemoryAllocation;
  ++allocations_made;
  *data = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*data == nullptr) return cudaErrorMemoryAllocation;
  const std::lock_guard lock(allocations_mutex);
  allocations[*data] = bytes;
  allocated_bytes += bytes;
  publish_allocated_bytes();
  return cudaSuccess;
}

cudaError_t cudaFree(void* data) {
  if (data == nullptr) return cudaSuccess;
  {
    const std::lock_guard lock(allocations_mutex);
    allocated_bytes -= allocations.at(data);
    allocations.erase(data);
    publish_allocated_bytes();
  }
  std::free(data);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** data, size_t bytes) {
  ++allocations_made;
  *data = std::malloc(bytes);
  return *data != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* data) {
  std::free(data);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  fake_cuda::enqueue(stream, [=] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  fake_cuda::enqueue(stream, [=] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  fake_cuda::drain(stream);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  fake_cuda::drain_all();
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  auto* s = new CUstream_st;
  s->worker = std::thread(run_stream, s, next_seed());
  {
    const std::lock_guard registry(streams_mutex);
    streams.push_back(s);
  }
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    const std::lock_guard registry(streams_mutex);
    std::erase(streams, stream);
  }
  {
    const std::lock_guard lock(stream->mutex);
    stream->stopping = true;
  }
  stream->changed.notify_all();
  stream->worker.join();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  unsigned long generation = 0;
  {
    const std::lock_guard lock(event->mutex);
    generation = ++event->recorded;
  }
  fake_cuda::enqueue(stream, [event, generation] {
    {
      const std::lock_guard lock(event->mutex);
      if (generation > event->completed) {
        event->completed = generation;
        event->at = std::chrono::steady_clock::now();
      }
    }
    event->changed.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  unsigned long generation = 0;
  {
    const std::lock_guard lock(event->mutex);
    generation = event->recorded;  // never recorded: 0, nothing to wait for
  }
  fake_cuda::enqueue(stream, [event, generation] {
    std::unique_lock lock(event->mutex);
    event->changed.wait(lock, [&] { return event->completed >= generation; });
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock lock(event->mutex);
  const unsigned long generation = event->recorded;
  event->changed.wait(lock, [&] { return event->completed >= generation; });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const std::lock_guard lock(event->mutex);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess) return cudaErrorNotReady;
  std::chrono::steady_clock::time_point from, to;
  {
    const std::lock_guard lock(start->mutex);
    from = start->at;
  }
  {
    const std::lock_guard lock(end->mutex);
    to = end->at;
  }
  *ms = std::chrono::duration<float, std::milli>(to - from).count();
  return cudaSuccess;
}

}  // extern "C"
