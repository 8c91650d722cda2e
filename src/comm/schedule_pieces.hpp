// What the executors that cut a Schedule into pieces share (point_to_point_executor.cpp, grouped_executor.cpp):
// the cutting itself, and LatestTouch, which piece last wrote (or read) each element.
#pragma once
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>

#include "dptrain/comm/schedule.hpp"

namespace dptrain {

// Disjoint element intervals, each labelled with the mark that last covered it: "which piece last
// wrote or read these elements". A mark replaces the labels of its range; callers that mark with growing labels
// get the latest toucher of a range as its largest label.
class LatestTouch {
 public:
  // The largest label on any element of `range`, 0 if none.
  std::size_t latest(ElementRange range) const {
    std::size_t label = 0;
    auto it = intervals_.upper_bound(range.begin);
    if (it != intervals_.begin() && std::prev(it)->second.end > range.begin) --it;
    for (; it != intervals_.end() && it->first < range.end(); ++it) label = std::max(label, it->second.label);
    return label;
  }

  // Labels every element of `range` with `label`.
  void mark(ElementRange range, std::size_t label) {
    if (range.count == 0) return;
    split_at(range.begin);
    split_at(range.end());
    intervals_.erase(intervals_.lower_bound(range.begin), intervals_.lower_bound(range.end()));
    intervals_.emplace(range.begin, Interval{range.end(), label});
  }

  void clear() { intervals_.clear(); }

 private:
  struct Interval {
    std::size_t end;
    std::size_t label;
  };

  // Makes `at` an interval boundary (an interval strictly containing it becomes two with the same label).
  void split_at(std::size_t at) {
    auto it = intervals_.upper_bound(at);
    if (it == intervals_.begin()) return;
    --it;
    if (it->first < at && at < it->second.end) {
      const Interval tail = it->second;
      it->second.end = at;
      intervals_.emplace(at, tail);
    }
  }

  std::map<std::size_t, Interval> intervals_;  // begin → interval
};

// How many pieces of at most piece_elements `range` is cut into (piece_elements may be huge: whole messages).
inline std::size_t pieces_of(ElementRange range, std::size_t piece_elements) {
  return range.count / piece_elements + (range.count % piece_elements != 0);
}

// Piece k of `range` (empty past its end).
inline ElementRange piece_of(ElementRange range, std::size_t piece_elements, std::size_t k) {
  const std::size_t offset = k < pieces_of(range, piece_elements) ? k * piece_elements : range.count;
  return {range.begin + offset, std::min(piece_elements, range.count - offset)};
}

// Calls add(piece range) for each piece of `range`, in order.
template <typename Add>
void for_each_piece(ElementRange range, std::size_t piece_elements, Add&& add) {
  for (std::size_t k = 0; k < pieces_of(range, piece_elements); ++k) add(piece_of(range, piece_elements, k));
}

}  // namespace dptrain
