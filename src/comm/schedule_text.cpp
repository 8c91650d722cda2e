// A collective's schedules in words: the rounds as the receivers see them, and the sums they leave.
#include "dptrain/comm/schedule_text.hpp"

#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dptrain/comm/schedule.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

// An element's value as text: "x2", or "a + b" for a sum (b in parentheses where it is a sum itself).
using Values = std::vector<std::string>;  // [count] of one rank

std::string sum(const std::string& accumulated, const std::string& incoming) {
  const bool compound = incoming.find(' ') != std::string::npos;
  return compound ? fmt::format("{} + ({})", accumulated, incoming) : fmt::format("{} + {}", accumulated, incoming);
}

std::string range_text(const ElementRange& r) { return fmt::format("[{}:{})", r.begin, r.end()); }

// One rank's values as maximal ranges of equal text: "[0:2) x1 + x0; [2:4) x1".
std::string values_text(const Values& values) {
  std::string text;
  for (std::size_t begin = 0; begin < values.size();) {
    std::size_t end = begin + 1;
    while (end < values.size() && values[end] == values[begin]) ++end;
    text += fmt::format("{}{} {}", text.empty() ? "" : "; ", range_text({begin, end - begin}), values[begin]);
    begin = end;
  }
  return text;
}

}  // namespace

std::string schedule_text(Algorithm algorithm, CollectiveOp op, int size, std::size_t count) {
  DP_ASSERT(algorithm != Algorithm::native && size >= 1 && size <= kScheduleTextMaxRanks && count >= 1 &&
            count <= kScheduleTextMaxCount);
  // schedules[rank][phase]: what each rank walks, phase by phase (the ring all-reduce has two).
  std::vector<std::vector<Schedule>> schedules;
  for (int rank = 0; rank < size; ++rank) schedules.push_back(collective_schedules(algorithm, op, rank, size, count));
  const std::size_t phases = schedules[0].size();

  std::vector<Values> values(static_cast<std::size_t>(size), Values(count));
  for (int rank = 0; rank < size; ++rank)
    for (std::string& v : values[rank]) v = fmt::format("x{}", rank);

  std::string text = fmt::format(
      "{} {} of {} elements over {} rank{} (x<r>: rank r's input)\n"
      "a line a round, with every rank's receives: r1[0:2) += r0 adds what rank 0 sends into rank 1's elements 0 "
      "and 1 (a + b: what rank 1 held, then what arrived); = copies it\n",
      algorithm_name(algorithm), collective_op_name(op), count, size, size == 1 ? "" : "s");
  int round_number = 0;
  for (std::size_t phase = 0; phase < phases; ++phase) {
    if (phases > 1) text += fmt::format("{}:\n", phase == 0 ? "reduce-scatter" : "all-gather");
    for (std::size_t round = 0; round < schedules[0][phase].rounds.size(); ++round) {
      // A send reads its range as it stood before the round; the k-th send from a to b meets b's k-th receive from a.
      const std::vector<Values> before = values;
      std::map<std::pair<int, int>, std::vector<ElementRange>> sent;  // (from, to) → ranges in list order
      for (int rank = 0; rank < size; ++rank)
        for (const Send& send : schedules[rank][phase].rounds[round].sends)
          sent[{rank, send.peer}].push_back(send.range);
      std::string line;
      for (int rank = 0; rank < size; ++rank) {
        std::map<int, std::size_t> taken;  // per sender, the sends matched so far
        for (const Receive& receive : schedules[rank][phase].rounds[round].receives) {
          const ElementRange from = sent.at({receive.peer, rank}).at(taken[receive.peer]++);
          DP_ASSERT(from.count == receive.range.count);
          for (std::size_t i = 0; i < receive.range.count; ++i) {
            std::string& value = values[rank][receive.range.begin + i];
            const std::string& incoming = before[receive.peer][from.begin + i];
            value = receive.reduce ? sum(value, incoming) : incoming;
          }
          line += fmt::format("   r{}{} {} r{}{}", rank, range_text(receive.range), receive.reduce ? "+=" : "=",
                              receive.peer, from.begin == receive.range.begin ? "" : range_text(from));
        }
      }
      text += fmt::format("round {}:{}\n", ++round_number, line);
    }
  }

  std::string sends;
  for (int rank = 0; rank < size; ++rank) {
    std::uint64_t elements = 0;
    for (const Schedule& s : schedules[rank]) elements += s.elements_sent();
    sends += fmt::format("{}r{} {}", rank == 0 ? "" : ", ", rank, elements);
  }
  text +=
      fmt::format("{} round{}; elements each rank sends: {}\n", round_number, round_number == 1 ? "" : "s", sends);
  bool same = true;
  for (int rank = 1; rank < size; ++rank) same = same && values[rank] == values[0];
  if (same) return text + fmt::format("every rank holds: {}\n", values_text(values[0]));
  text += op == CollectiveOp::reduce_scatter
              ? "each rank holds (its result is its own chunk; the rest is what the rounds left there):\n"
              : "each rank holds:\n";
  for (int rank = 0; rank < size; ++rank) text += fmt::format("  r{}: {}\n", rank, values_text(values[rank]));
  return text;
}

}  // namespace dptrain
