// CudaDevice: one GPU as a Device — cudaMalloc'd memory, a non-blocking compute stream, and CUDA events. Copies and
// zeroing are issued on the compute stream; upload and download wait for it (the Memory contract), so they are the
// only host synchronisations besides synchronize(). upload_in_order does not wait: it copies through page-locked
// staging buffers of its own.
#pragma once
#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>

#include "dptrain/compute/device.hpp"

namespace dptrain::cuda {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal);  // makes `ordinal` the calling thread's current device
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string name() const override { return name_; }
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return compute_; }
  std::size_t memory_in_use() const override;  // cudaMemGetInfo: total − free
  std::size_t memory_free() const override;

  void* allocate(std::size_t bytes) override;
  void release(void* data) noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void download(void* host_dst, const void* src, std::size_t bytes) override;
  bool host_accessible() const override { return false; }
  void upload_in_order(void* dst, const void* host_src, std::size_t bytes) override;

  void bind_thread() override;
  Stream compute_stream() override { return {compute_}; }
  Stream create_stream() override;
  void destroy(Stream stream) noexcept override;
  Event create_event() override;
  void destroy(Event event) noexcept override;
  void record(Event event, Stream stream) override;
  void wait(Stream stream, Event event) override;
  void synchronize(Event event) override;
  void synchronize() override;
  double elapsed_seconds(Event start, Event end) override;

 private:
  // A page-locked buffer upload_in_order copies through, and the event after the copy that reads it.
  struct Staging {
    void* host = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t read = nullptr;  // made with the device; waiting on it before its first record returns at once
  };

  int ordinal_;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  // Used in turn: a buffer is written again kStagings calls later, by when its copy has long run (a micro-step
  // makes two calls; the host waits only if it is that far ahead of the device).
  static constexpr std::size_t kStagings = 4;
  std::array<Staging, kStagings> stagings_;
  std::size_t next_staging_ = 0;
};

}  // namespace dptrain::cuda
