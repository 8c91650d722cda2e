// The CUDA device: memory, streams and events of one GPU.
#include "cuda_device.hpp"

#include <fmt/format.h>

#include <cstring>

#include "cuda_check.hpp"
#include "dptrain/compute/backend.hpp"

namespace dptrain::cuda {

namespace {

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s.handle); }
cudaEvent_t event_of(Event e) { return static_cast<cudaEvent_t>(e.handle); }

}  // namespace

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  DP_CUDA(cudaSetDevice(ordinal));
  cudaDeviceProp properties{};
  DP_CUDA(cudaGetDeviceProperties(&properties, ordinal));
  name_ = properties.name;
  DP_CUDA(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  for (Staging& s : stagings_) DP_CUDA(cudaEventCreateWithFlags(&s.read, cudaEventDisableTiming));
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(compute_);
  for (Staging& s : stagings_) {
    if (s.read != nullptr) cudaEventDestroy(s.read);
    if (s.host != nullptr) cudaFreeHost(s.host);
  }
  cudaStreamDestroy(compute_);
}

void CudaDevice::bind_thread() { DP_CUDA(cudaSetDevice(ordinal_)); }

std::size_t CudaDevice::memory_in_use() const {
  std::size_t free = 0, total = 0;
  DP_CUDA(cudaMemGetInfo(&free, &total));
  return total - free;
}

std::size_t CudaDevice::memory_free() const {
  std::size_t free = 0, total = 0;
  DP_CUDA(cudaMemGetInfo(&free, &total));
  return free;
}

void* CudaDevice::allocate(std::size_t bytes) {
  void* data = nullptr;
  DP_CUDA(cudaMalloc(&data, bytes));  // 256-byte aligned (Memory::kAlignment)
  return data;
}

// The work issued before may still use the memory (the contract of Memory::release): wait for all of it first,
// rather than rely on cudaFree's "may synchronize". Buffers are released at set-up, teardown and when a scratch
// grows, never in a step's steady state.
void CudaDevice::release(void* data) noexcept {
  cudaDeviceSynchronize();  // an error here will be reported by the next checked call
  cudaFree(data);
}

void CudaDevice::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) DP_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
}

void CudaDevice::zero(void* dst, std::size_t bytes) {
  if (bytes) DP_CUDA(cudaMemsetAsync(dst, 0, bytes, compute_));
}

void CudaDevice::upload(void* dst, const void* host_src, std::size_t bytes) {
  if (!bytes) return;
  DP_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, compute_));
  DP_CUDA(cudaStreamSynchronize(compute_));  // the host may reuse host_src when this returns
}

void CudaDevice::upload_in_order(void* dst, const void* host_src, std::size_t bytes) {
  if (!bytes) return;
  Staging& s = stagings_[next_staging_];
  next_staging_ = (next_staging_ + 1) % kStagings;
  DP_CUDA(cudaEventSynchronize(s.read));  // its last copy has read it
  if (s.bytes < bytes) {  // grown to the largest upload: in the first step (or a first evaluation of more windows)
    if (s.host != nullptr) DP_CUDA(cudaFreeHost(s.host));
    s.host = nullptr;
    s.bytes = 0;
    DP_CUDA(cudaMallocHost(&s.host, bytes));
    s.bytes = bytes;
  }
  std::memcpy(s.host, host_src, bytes);
  // From page-locked memory the copy is queued and the call returns at once.
  DP_CUDA(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, compute_));
  DP_CUDA(cudaEventRecord(s.read, compute_));
}

void CudaDevice::download(void* host_dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  DP_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
  DP_CUDA(cudaStreamSynchronize(compute_));
}

Stream CudaDevice::create_stream() {
  cudaStream_t stream = nullptr;
  DP_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return {stream};
}

void CudaDevice::destroy(Stream stream) noexcept {
  if (stream.handle && stream_of(stream) != compute_) cudaStreamDestroy(stream_of(stream));
}

Event CudaDevice::create_event() {
  cudaEvent_t event = nullptr;
  DP_CUDA(cudaEventCreate(&event));  // with timing: events time the collectives and the step
  return {event};
}

void CudaDevice::destroy(Event event) noexcept {
  if (event.handle) cudaEventDestroy(event_of(event));
}

void CudaDevice::record(Event event, Stream stream) { DP_CUDA(cudaEventRecord(event_of(event), stream_of(stream))); }
void CudaDevice::wait(Stream stream, Event event) {
  DP_CUDA(cudaStreamWaitEvent(stream_of(stream), event_of(event), 0));
}
void CudaDevice::synchronize(Event event) { DP_CUDA(cudaEventSynchronize(event_of(event))); }
void CudaDevice::synchronize() { DP_CUDA(cudaDeviceSynchronize()); }

double CudaDevice::elapsed_seconds(Event start, Event end) {
  float ms = 0.0f;
  DP_CUDA(cudaEventElapsedTime(&ms, event_of(start), event_of(end)));
  return double(ms) * 1e-3;
}

}  // namespace dptrain::cuda

namespace dptrain {

// How many GPUs this process sees, or why it sees none (no driver, a driver older than the runtime, no GPU).
int visible_gpu_count(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = fmt::format("{} ({})", cudaGetErrorString(error), cudaGetErrorName(error));
    return 0;
  }
  if (count == 0 && reason) *reason = "the CUDA driver sees no GPU";
  return count;
}

}  // namespace dptrain
