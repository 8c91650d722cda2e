// GroupedExecutor: runs a Schedule on a transport that moves data in groups enqueued on a stream and adds on a
// second stream (NCCL: one ncclGroupStart/End of sends and receives on the transfer stream, the reduce-add kernel
// on the reduce stream, events between them; nothing waits on the host until the end). The transport supplies the
// streams (StepStreams); the cutting into steps and their dependencies are here, shared and tested on the CPU.
//
// The schedule is cut into steps: step (round i, piece k) holds the k-th piece of every message of round i, pieces
// of at most piece_elements, so that the addition of one piece overlaps the transfer of the next. Every message is
// cut alike (a sender cannot tell whether its receiver adds), so a piece's send and receive are in the same step
// (i, k) on both ranks, every rank issues the steps in that order, and groups cannot wait on each other in a cycle.
// For each step, in order:
//   1. the transfer stream waits for the reduces its transfers depend on: a send or plain receive of a range an
//      earlier step's reduce wrote, a reduce receive into a scratch slot whose previous piece is still to be added;
//   2. one group of the step's sends and receives (reduce receives land in scratch slots, plain ones in place);
//   3. the reduce stream waits for that group, then adds the step's reduce pieces in, in schedule order.
// Everything else is ordered by the streams: groups run one after another, as do reduces, and a reduce waits for
// its own step's group, so for every group before it. Sums are added in the order the schedule lists, as by the
// point-to-point executor: the two give bitwise the same results.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "dptrain/comm/transport.hpp"

namespace dptrain {

// One message of a group, in raw bytes.
struct Message {
  int peer = 0;
  void* data = nullptr;
  std::size_t bytes = 0;
};

// What a grouped transport provides: a transfer stream and a reduce stream, and events between them. Steps are
// numbered from 0 in the order the executor issues them.
class StepStreams {
 public:
  virtual ~StepStreams() = default;
  // Later transfers wait until the reduces of step `step` (so of every step before it) are done.
  virtual void transfers_wait_for_reduces(std::size_t step) = 0;
  // One group of sends and receives, enqueued on the transfer stream after every earlier group.
  virtual void transfer(std::span<const Message> sends, std::span<const Message> receives) = 0;
  // Later reduces wait until every group issued so far is done.
  virtual void reduces_wait_for_transfers() = 0;
  // Marks the end of step `step`'s reduces (issued through the executor's ReduceAdd, on the reduce stream).
  virtual void record_reduces(std::size_t step) = 0;
  // Returns when everything issued is done: the data holds the result and every send has completed.
  virtual void finish() = 0;
};

class GroupedExecutor {
 public:
  // Each reduce receive of a step gets a scratch slot; a slot is reused kSlotsPerReduce steps later, so the
  // transfers may run that many steps ahead of the additions (no more slots than the schedule has reduce receives).
  static constexpr std::size_t kSlotsPerReduce = 4;

  struct StepReceive {
    int peer;
    ElementRange range;
    bool reduce;       // true: lands in scratch slot `slot` and is added into `range`; false: lands in `range`
    std::size_t slot;  // (reduce receives)
  };
  struct Step {
    std::size_t round = 0, piece = 0;  // the k-th piece of round i's messages
    std::vector<Send> sends;
    std::vector<StepReceive> receives;
    // The step's transfers wait for the reduces of step after_reduces − 1 (0: for none).
    std::size_t after_reduces = 0;
    bool has_reduce = false;
  };
  struct Plan {
    std::vector<Step> steps;
    std::size_t slots = 0, slot_elements = 0;  // the receive scratch: slots × slot_elements
  };

  // The steps of `schedule` (pure; what run() issues, exposed for tests).
  static Plan plan(const Schedule& schedule, std::size_t piece_elements);

  // Transport::execute's contract, on `streams`; `reduce_add` must enqueue on the reduce stream, and `data` and
  // the scratch are in memory the streams' transfers and reduces can reach. Messages are counted into nothing:
  // the streams' transport counts its own bytes.
  void run(StepStreams& streams, const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add,
           Scratch& scratch, std::size_t piece_bytes);

 private:
  std::vector<Message> sends_, receives_;  // one step's, kept so a steady stream of collectives does not allocate
};

}  // namespace dptrain
