// GroupedExecutor: a schedule cut into steps of grouped transfers, with the reduce dependencies each step's
// transfers must wait for (see the header), issued on a transport's StepStreams.
#include "dptrain/comm/grouped_executor.hpp"

#include <algorithm>

#include "schedule_pieces.hpp"

namespace dptrain {

GroupedExecutor::Plan GroupedExecutor::plan(const Schedule& schedule, std::size_t piece_elements) {
  Plan plan;
  // The slot count follows from the most reduce receives in one round (every step of a round has as many).
  std::size_t reduces_per_step = 0;
  for (const Round& round : schedule.rounds) {
    const auto reduces = std::count_if(round.receives.begin(), round.receives.end(),
                                       [](const Receive& r) { return r.reduce && r.range.count > 0; });
    reduces_per_step = std::max(reduces_per_step, std::size_t(reduces));
  }
  plan.slots = kSlotsPerReduce * reduces_per_step;

  // Labels: 1 + the step whose reduce last wrote an element (0: no reduce, or a plain receive wrote it since,
  // which itself waited for that reduce).
  LatestTouch reduced;
  std::vector<std::size_t> step_of_reduce;  // reduce piece q (in schedule order) → its step
  for (std::size_t i = 0; i < schedule.rounds.size(); ++i) {
    const Round& round = schedule.rounds[i];
    std::size_t pieces = 0;
    for (const Send& send : round.sends) pieces = std::max(pieces, pieces_of(send.range, piece_elements));
    for (const Receive& receive : round.receives) pieces = std::max(pieces, pieces_of(receive.range, piece_elements));
    for (std::size_t k = 0; k < pieces; ++k) {
      Step& step = plan.steps.emplace_back();
      step.round = i;
      step.piece = k;
      const std::size_t index = plan.steps.size() - 1;
      auto depend_on = [&](std::size_t label) { step.after_reduces = std::max(step.after_reduces, label); };
      for (const Send& send : round.sends) {
        const ElementRange piece = piece_of(send.range, piece_elements, k);
        if (piece.count == 0) continue;
        depend_on(reduced.latest(piece));
        step.sends.push_back({send.peer, piece});
      }
      for (const Receive& receive : round.receives) {
        const ElementRange piece = piece_of(receive.range, piece_elements, k);
        if (piece.count == 0) continue;
        std::size_t slot = 0;
        if (receive.reduce) {
          const std::size_t q = step_of_reduce.size();
          slot = q % plan.slots;
          if (q >= plan.slots) depend_on(step_of_reduce[q - plan.slots] + 1);
          step_of_reduce.push_back(index);
          plan.slot_elements = std::max(plan.slot_elements, piece.count);
          step.has_reduce = true;
        } else {
          depend_on(reduced.latest(piece));
        }
        step.receives.push_back({receive.peer, piece, receive.reduce, slot});
      }
      // Marked after the queries: within a round, sends and receives are disjoint (the Schedule contract).
      for (const StepReceive& receive : step.receives) reduced.mark(receive.range, receive.reduce ? index + 1 : 0);
    }
  }
  // No more slots than reduce receives (the tree's are whole messages, one step per round: a slot apiece).
  plan.slots = std::min(plan.slots, step_of_reduce.size());
  return plan;
}

void GroupedExecutor::run(StepStreams& streams, const Schedule& schedule, void* data, DType dtype,
                          const ReduceAdd& reduce_add, Scratch& scratch, std::size_t piece_bytes) {
  const std::size_t element = element_size(dtype);
  const Plan plan = GroupedExecutor::plan(schedule, std::max<std::size_t>(1, piece_bytes / element));
  if (plan.steps.empty()) {  // one rank, or no elements: nothing moves, but the operation still ends (and is timed)
    streams.finish();
    return;
  }
  auto* base = static_cast<std::byte*>(data);
  auto* slots = static_cast<std::byte*>(scratch.get(plan.slots * plan.slot_elements * element));
  auto at = [&](ElementRange range) { return base + range.begin * element; };
  auto slot_at = [&](std::size_t slot) { return slots + slot * plan.slot_elements * element; };

  std::size_t waited = 0;  // the transfer stream already waits for the reduces of steps [0, waited)
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& step = plan.steps[s];
    if (step.after_reduces > waited) {
      streams.transfers_wait_for_reduces(step.after_reduces - 1);
      waited = step.after_reduces;
    }
    sends_.clear();
    receives_.clear();
    for (const Send& send : step.sends) sends_.push_back({send.peer, at(send.range), send.range.count * element});
    for (const StepReceive& receive : step.receives) {
      receives_.push_back(
          {receive.peer, receive.reduce ? slot_at(receive.slot) : at(receive.range), receive.range.count * element});
    }
    streams.transfer(sends_, receives_);
    if (!step.has_reduce) continue;
    streams.reduces_wait_for_transfers();
    for (const StepReceive& receive : step.receives)
      if (receive.reduce) reduce_add(at(receive.range), slot_at(receive.slot), receive.range.count, dtype);
    streams.record_reduces(s);
  }
  streams.finish();
}

}  // namespace dptrain
