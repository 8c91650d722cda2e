// PointToPointExecutor: a schedule as a stream of pieces with per-range dependencies (see the header), driven by
// waiting for receives in schedule order and posting whatever that unblocks.
#include "dptrain/comm/point_to_point_executor.hpp"

#include <algorithm>
#include <stdexcept>

#include "dptrain/core/error.hpp"
#include "schedule_pieces.hpp"

namespace dptrain {

void PointToPointExecutor::plan(const Schedule& schedule, std::size_t piece_elements) {
  sends_.clear();
  receives_.clear();
  reduce_pieces_ = 0;
  largest_reduce_piece_ = 0;
  // Labels are 1 + the piece's index, so "complete pieces [0, label)" is exactly the dependency.
  LatestTouch written, read;
  for (const Round& round : schedule.rounds) {
    const std::size_t first_send = sends_.size(), first_receive = receives_.size();
    // Queries see only earlier rounds: within a round, sends and receives are disjoint by the Schedule contract.
    for (const Send& send : round.sends) {
      for_each_piece(send.range, piece_elements, [&](ElementRange piece) {
        sends_.push_back({send.peer, piece, written.latest(piece)});
      });
    }
    for (const Receive& receive : round.receives) {
      for_each_piece(receive.range, piece_elements, [&](ElementRange piece) {
        receives_.push_back({receive.peer, piece, receive.reduce, written.latest(piece), read.latest(piece),
                             receive.reduce ? reduce_pieces_++ : 0});
        if (receive.reduce) largest_reduce_piece_ = std::max(largest_reduce_piece_, piece.count);
      });
    }
    for (std::size_t i = first_send; i < sends_.size(); ++i) read.mark(sends_[i].range, i + 1);
    for (std::size_t i = first_receive; i < receives_.size(); ++i) written.mark(receives_[i].range, i + 1);
  }
}

void PointToPointExecutor::run(Transport& transport, const Schedule& schedule, void* data, DType dtype,
                               const ReduceAdd& reduce_add, Scratch& scratch, std::size_t piece_bytes) {
  const std::size_t element = element_size(dtype);
  plan(schedule, std::max<std::size_t>(1, piece_bytes / element));
  if (sends_.empty() && receives_.empty()) return;  // one rank: nothing moves, wherever the data lives
  if (!scratch.memory().host_accessible()) {
    throw std::logic_error(
        "point-to-point executor: the receive scratch is in memory the host cannot access; the MPI transport "
        "adds on the host, so make_collectives needs host-accessible Memory (or a device transport)");
  }

  auto* base = static_cast<std::byte*>(data);
  const std::size_t slots = std::min(kReceiveWindow, reduce_pieces_);
  const std::size_t slot_bytes = largest_reduce_piece_ * element;
  auto* incoming = static_cast<std::byte*>(scratch.get(slots * slot_bytes));
  auto slot_of = [&](const ReceivePiece& piece) { return incoming + (piece.reduce_index % slots) * slot_bytes; };
  send_requests_.assign(sends_.size(), Request{});
  receive_requests_.assign(receives_.size(), Request{});

  std::size_t posted_sends = 0, waited_sends = 0;   // send pieces [0, waited_sends) are known complete
  std::size_t posted_receives = 0, completed = 0, reduced = 0;
  auto post_ready_sends = [&] {
    for (; posted_sends < sends_.size() && sends_[posted_sends].after_receives <= completed; ++posted_sends) {
      const SendPiece& piece = sends_[posted_sends];
      send_requests_[posted_sends] =
          transport.isend(piece.peer, base + piece.range.begin * element, piece.range.count * element);
    }
  };
  auto post_receives = [&] {
    for (; posted_receives < receives_.size(); ++posted_receives) {
      const ReceivePiece& piece = receives_[posted_receives];
      std::byte* target = nullptr;
      if (piece.reduce) {
        if (piece.reduce_index >= reduced + slots) break;  // its slot still holds a piece not yet added
        target = slot_of(piece);
      } else {
        if (piece.after_receives > completed || piece.after_sends > waited_sends) break;
        target = base + piece.range.begin * element;
      }
      receive_requests_[posted_receives] = transport.irecv(piece.peer, target, piece.range.count * element);
    }
  };
  auto wait_sends = [&](std::size_t until) {
    DP_ASSERT(until <= posted_sends);  // earlier-round sends are posted before any later-round receive completes
    for (; waited_sends < until; ++waited_sends) transport.wait(send_requests_[waited_sends]);
  };

  while (completed < receives_.size()) {
    post_receives();
    post_ready_sends();
    const ReceivePiece& piece = receives_[completed];
    if (posted_receives == completed) {
      // Only a plain receive whose range earlier sends are still reading can be held back here.
      wait_sends(piece.after_sends);
      continue;
    }
    transport.wait(receive_requests_[completed]);
    if (piece.reduce) {
      wait_sends(piece.after_sends);
      reduce_add(base + piece.range.begin * element, slot_of(piece), piece.range.count, dtype);
      ++reduced;
    }
    ++completed;
  }
  post_ready_sends();
  DP_ASSERT(posted_sends == sends_.size());
  transport.wait_all(std::span<Request>(send_requests_).subspan(waited_sends));
}

}  // namespace dptrain
