// The cpu Device: host memory, one stream (every operation has finished when its call returns), events that hold
// the host time at which they were recorded.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "dptrain/compute/device.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kParallelZeroBytes = std::size_t(1) << 20;  // zero() from this size on uses the team
constexpr std::size_t kZeroPieceBytes = kParallelZeroBytes / 2;       // in pieces of this size

class CpuDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }

  void* allocate(std::size_t bytes) override { return host_memory().allocate(bytes); }
  void release(void* data) noexcept override { host_memory().release(data); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  // Large regions (the residual stream's gradient before each backward, the gradients before each step): one
  // thread alone is held to its core's share of the memory bandwidth, so a large region is cleared by the OpenMP
  // team in pieces. Small ones (the communication's padding) stay on the calling thread.
  void zero(void* dst, std::size_t bytes) override {
    if (bytes < kParallelZeroBytes || omp_in_parallel()) {
      std::memset(dst, 0, bytes);
      return;
    }
    const std::size_t pieces = (bytes + kZeroPieceBytes - 1) / kZeroPieceBytes;
#pragma omp parallel for schedule(static)
    for (std::size_t piece = 0; piece < pieces; ++piece) {
      const std::size_t begin = piece * kZeroPieceBytes;
      std::memset(static_cast<char*>(dst) + begin, 0, std::min(bytes - begin, kZeroPieceBytes));
    }
  }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { std::memcpy(dst, host_src, bytes); }
  void download(void* host_dst, const void* src, std::size_t bytes) override { std::memcpy(host_dst, src, bytes); }
  bool host_accessible() const override { return true; }

  Stream compute_stream() override { return {}; }
  Stream create_stream() override { return {}; }
  void destroy(Stream) noexcept override {}

  Event create_event() override { return {new double(0.0)}; }
  void destroy(Event event) noexcept override { delete static_cast<double*>(event.handle); }
  void record(Event event, Stream) override { *static_cast<double*>(event.handle) = now(); }
  void wait(Stream, Event) override {}
  void synchronize(Event) override {}
  void synchronize() override {}
  double elapsed_seconds(Event start, Event end) override {
    return *static_cast<double*>(end.handle) - *static_cast<double*>(start.handle);
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace dptrain
