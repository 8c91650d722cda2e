// PointToPointExecutor: runs a Schedule over a Transport's isend/irecv/wait with the data and the receive scratch
// in host memory (the MPI transport's executor). It walks the schedule as one stream of pieces rather than round
// by round, so the ring keeps its pipeline without being written for it:
//   - every message is split into pieces of at most piece_bytes (both ends split alike: they see the same count);
//   - a send piece is posted as soon as every earlier-round receive overlapping it has arrived and been added in
//     (so a ring piece is forwarded right after its own reduce-add, not after the whole round);
//   - reduce receives are posted kReceiveWindow pieces ahead into a ring of scratch slots; plain receives are
//     posted as early as their range allows (a ring all-gather's all up front);
//   - receives complete and are reduced in schedule order, so sums are added in the order the schedule lists.
// Posting order per peer is schedule order, which is what the Transport's pair-wise matching needs.
//
// Hazards are tracked per element range: a plain receive is posted only after every earlier receive writing its
// range has completed and every earlier send reading it has completed; a reduce writes its range only after the
// earlier sends reading it have completed.
#pragma once
#include <cstddef>
#include <vector>

#include "dptrain/comm/transport.hpp"

namespace dptrain {

class PointToPointExecutor {
 public:
  // Reduce receives posted ahead of the one being added (the scratch is this many pieces).
  static constexpr std::size_t kReceiveWindow = 4;

  // Transport::execute's contract; scratch.memory() must be host-accessible (std::logic_error otherwise).
  void run(Transport& transport, const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add,
           Scratch& scratch, std::size_t piece_bytes);

 private:
  struct SendPiece {
    int peer;
    ElementRange range;
    std::size_t after_receives;  // receive pieces [0, after_receives) must be complete before it is posted
  };
  struct ReceivePiece {
    int peer;
    ElementRange range;
    bool reduce;
    std::size_t after_receives;  // (plain receives) receive pieces that must be complete before it is posted
    std::size_t after_sends;     // send pieces [0, after_sends) must be complete before it writes its range
    std::size_t reduce_index;    // (reduce receives) its place among the reduce pieces: scratch slot = index mod W
  };

  // Splits the schedule into pieces and works out each piece's dependencies.
  void plan(const Schedule& schedule, std::size_t piece_elements);

  // Kept across calls so a steady stream of collectives does not allocate.
  std::vector<SendPiece> sends_;
  std::vector<ReceivePiece> receives_;
  std::vector<Request> send_requests_, receive_requests_;
  std::size_t reduce_pieces_ = 0, largest_reduce_piece_ = 0;
};

}  // namespace dptrain
