// Device: the compute device under a Backend — its memory (allocate, copy in any direction, zero, upload and
// download; core/memory.hpp) plus streams and events. Work issued on a stream runs in issue order; an event marks a
// point of a stream that another stream or the host can wait for, and two events time what ran between them.
// On the cpu device every operation has finished when its call returns, so streams are one and the same, waiting
// returns at once, and an event holds the host time at which it was recorded.
#pragma once
#include <memory>
#include <string>

#include "dptrain/core/memory.hpp"

namespace dptrain {

// Opaque handles: only the device that made them can interpret them.
struct Stream {
  void* handle = nullptr;
};
struct Event {
  void* handle = nullptr;
};

class Device : public Memory {
 public:
  virtual std::string name() const = 0;

  // Makes this the device of the calling thread (a GPU's runtime keeps one current device per thread); a thread
  // other than the one that made the device calls it before issuing work. Nothing to do on the cpu.
  virtual void bind_thread() {}

  virtual Stream compute_stream() = 0;  // where the Backend's operations run
  virtual Stream create_stream() = 0;   // e.g. for communication
  virtual void destroy(Stream stream) noexcept = 0;

  virtual Event create_event() = 0;
  virtual void destroy(Event event) noexcept = 0;
  virtual void record(Event event, Stream stream) = 0;
  virtual void wait(Stream stream, Event event) = 0;  // later work on `stream` waits for `event`
  virtual void synchronize(Event event) = 0;          // the host waits for `event`
  virtual void synchronize() = 0;                     // the host waits for everything issued
  // Seconds between two recorded events (both synchronised).
  virtual double elapsed_seconds(Event start, Event end) = 0;

  // Copies host_src into dst on the compute stream, after the work issued there before, without waiting for that
  // work: the host may reuse host_src when this returns, and dst holds the bytes for the work issued after it (the
  // step's inputs, so that the host need not wait for the device before queueing a micro-step). The cpu device
  // copies at once.
  virtual void upload_in_order(void* dst, const void* host_src, std::size_t bytes) { upload(dst, host_src, bytes); }

  // A device with memory of its own: bytes in use (by every process on it) and free, as its driver reports them.
  // Zero for a device whose memory is the host's (the host's figures are measured elsewhere).
  virtual std::size_t memory_in_use() const { return 0; }
  virtual std::size_t memory_free() const { return 0; }
};

std::unique_ptr<Device> make_cpu_device();

}  // namespace dptrain
