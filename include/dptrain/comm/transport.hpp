// Transport: the byte-moving layer every collective is written over. A rank in a group of size() ranks posts
// non-blocking tagged sends and receives of raw bytes and waits for them. Implementations: MpiTransport (here),
// a NCCL transport later. Kept minimal on purpose: no datatypes, no collectives, no probing.
//
// Contract: a receive of n bytes matches a send of exactly n bytes from that peer with that tag; messages between
// the same pair with the same tag match in the order they were posted. Buffers must stay valid and untouched
// until the request has been waited for.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace dptrain {

// An in-flight send or receive. Opaque: only the transport that issued it can interpret `id`.
struct Request {
  std::int64_t id = -1;
  bool active() const { return id >= 0; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Request isend(int peer, int tag, const void* data, std::size_t bytes) = 0;
  virtual Request irecv(int peer, int tag, void* data, std::size_t bytes) = 0;

  // Blocks until the request completed and marks it inactive; waiting for an inactive request returns at once.
  virtual void wait(Request& request) = 0;
  virtual void wait_all(std::span<Request> requests);

  // Every byte this rank has handed to isend since construction or the last reset (counted when posted).
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  void reset_bytes_sent() { bytes_sent_.store(0, std::memory_order_relaxed); }

 protected:
  void count_sent(std::size_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> bytes_sent_{0};
};

}  // namespace dptrain
