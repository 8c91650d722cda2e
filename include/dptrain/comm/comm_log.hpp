// CommLog: one record per collective call (what, how big, bytes this rank put on the wire, wall time). The
// collectives append; the trainer reads and clears it once per step to print comm_ms and comm_bytes. Guarded by a
// mutex because the comm thread appends while the main thread may read between steps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "dptrain/comm/algorithm.hpp"
#include "dptrain/comm/dtype.hpp"

namespace dptrain {

struct CommRecord {
  CollectiveOp op = CollectiveOp::all_reduce;
  Algorithm algo = Algorithm::ring;
  DType dtype = DType::bf16;
  std::size_t count = 0;        // elements in the whole buffer
  std::uint64_t bytes = 0;      // payload: count · element size
  std::uint64_t bytes_sent = 0; // wire bytes this rank sent (for native: what the ring would send, see docs)
  double seconds = 0;           // the call's time on this rank: exit_s − entry_s (a device transport's: on the device)
  // When this rank entered and left the call, on the steady clock (CLOCK_MONOTONIC: seconds since boot, one clock
  // for every process of a machine), so that ranks can compare their entry times (collective_skew.hpp).
  double entry_s = 0, exit_s = 0;
  // seconds split into waiting for the last rank to enter (skew) and the rest (transfer); filled once the ranks
  // have exchanged entry times (split_skew), else transfer_s = seconds.
  double skew_s = 0, transfer_s = 0;
};

class CommLog {
 public:
  void add(const CommRecord& record);
  std::vector<CommRecord> take();  // the records, oldest first, leaving the log empty
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<CommRecord> records_;
};

}  // namespace dptrain
