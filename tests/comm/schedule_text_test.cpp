// The schedules in words (dpbench --schedule): one text checked whole, and for every algorithm, operation and group
// size up to 8 what its last lines say each element holds, against what the collective must leave there.
#include "dptrain/comm/schedule_text.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "dptrain/comm/chunks.hpp"

namespace dptrain {
namespace {

TEST(CommScheduleText, RingAllReduceOfSixElementsOverThreeRanks) {
  // Round s of the reduce-scatter: rank r receives chunk r−s−2 from r−1 and adds it in; of the all-gather, chunk
  // r−s−1 in place. Chunk c's sum starts at rank c+1 and ends at rank c, which adds its own x_c to it.
  EXPECT_EQ(schedule_text(Algorithm::ring, CollectiveOp::all_reduce, 3, 6),
            "ring all_reduce of 6 elements over 3 ranks (x<r>: rank r's input)\n"
            "a line a round, with every rank's receives: r1[0:2) += r0 adds what rank 0 sends into rank 1's elements "
            "0 and 1 (a + b: what rank 1 held, then what arrived); = copies it\n"
            "reduce-scatter:\n"
            "round 1:   r0[2:4) += r2   r1[4:6) += r0   r2[0:2) += r1\n"
            "round 2:   r0[0:2) += r2   r1[2:4) += r0   r2[4:6) += r1\n"
            "all-gather:\n"
            "round 3:   r0[4:6) = r2   r1[0:2) = r0   r2[2:4) = r1\n"
            "round 4:   r0[2:4) = r2   r1[4:6) = r0   r2[0:2) = r1\n"
            "4 rounds; elements each rank sends: r0 8, r1 8, r2 8\n"
            "every rank holds: [0:2) x0 + (x2 + x1); [2:4) x1 + (x0 + x2); [4:6) x2 + (x1 + x0)\n");
}

// What each element of each rank holds, from the text's last lines: the inputs x<r> its sum names, in order.
std::vector<std::vector<std::vector<int>>> holdings(const std::string& text, int size, std::size_t count) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<std::string> per_rank;
  if (const auto every = std::find_if(lines.begin(), lines.end(),
                                      [](const std::string& l) { return l.rfind("every rank holds: ", 0) == 0; });
      every != lines.end()) {
    per_rank.assign(std::size_t(size), every->substr(18));
  } else {
    for (int r = 0; r < size; ++r) {
      const std::string prefix = "  r" + std::to_string(r) + ": ";
      const auto line =
          std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
      EXPECT_NE(line, lines.end()) << prefix << " in\n" << text;
      per_rank.push_back(line == lines.end() ? "" : line->substr(prefix.size()));
    }
  }
  const std::regex range(R"(\[(\d+):(\d+)\) ([^;]+))"), input(R"(x(\d+))");
  std::vector<std::vector<std::vector<int>>> held(static_cast<std::size_t>(size),
                                                  std::vector<std::vector<int>>(count));
  for (int r = 0; r < size; ++r) {
    for (std::sregex_iterator m(per_rank[r].begin(), per_rank[r].end(), range), end; m != end; ++m) {
      std::vector<int> terms;
      const std::string sum = (*m)[3];
      for (std::sregex_iterator t(sum.begin(), sum.end(), input); t != std::sregex_iterator(); ++t)
        terms.push_back(std::stoi((*t)[1]));
      for (std::size_t i = std::stoul((*m)[1]); i < std::stoul((*m)[2]); ++i) held[r][i] = terms;
    }
  }
  return held;
}

TEST(CommScheduleText, EveryElementEndsAsTheCollectiveRequires) {
  for (Algorithm algorithm : {Algorithm::ring, Algorithm::tree})
    for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter, CollectiveOp::all_gather})
      for (int size = 1; size <= 8; ++size)
        for (std::size_t count : {std::size_t(1), std::size_t(size), std::size_t(2 * size + 1)}) {
          const std::string text = schedule_text(algorithm, op, size, count);
          const auto held = holdings(text, size, count);
          std::vector<int> everyone(static_cast<std::size_t>(size));
          for (int r = 0; r < size; ++r) everyone[r] = r;
          for (int r = 0; r < size; ++r) {
            for (std::size_t i = 0; i < count; ++i) {
              int owner = 0;  // the rank whose chunk holds element i
              while (i >= chunk_begin(count, size, owner) + chunk_size(count, size, owner)) ++owner;
              std::vector<int> terms = held[r][i];
              std::sort(terms.begin(), terms.end());
              const auto where = ::testing::Message() << "rank " << r << " element " << i << " in\n" << text;
              if (op == CollectiveOp::all_reduce || (op == CollectiveOp::reduce_scatter && owner == r)) {
                EXPECT_EQ(terms, everyone) << where;  // each input added exactly once
              } else if (op == CollectiveOp::all_gather) {
                EXPECT_EQ(held[r][i], std::vector<int>{owner}) << where;  // the owner's input, copied
              }
              if (algorithm == Algorithm::ring && terms.size() == static_cast<std::size_t>(size) && size > 1) {
                EXPECT_EQ(held[r][i].front(), owner) << where;  // the ring's last addition is the owner's own
              }
            }
          }
        }
}

}  // namespace
}  // namespace dptrain
