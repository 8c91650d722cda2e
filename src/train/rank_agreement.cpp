// Agreement of the ranks' options: hashes first (one allgather), then the text of the first difference.
#include "dptrain/train/rank_agreement.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"

namespace dptrain {

namespace {

std::uint64_t text_hash(const std::string& text) { return fnv1a(text.data(), text.size()); }

}  // namespace

std::optional<Difference> first_difference(const std::vector<std::uint64_t>& hashes, std::size_t values, int ranks) {
  DP_ASSERT(hashes.size() == values * std::size_t(ranks));
  for (std::size_t v = 0; v < values; ++v)
    for (int r = 1; r < ranks; ++r)
      if (hashes[std::size_t(r) * values + v] != hashes[v]) return Difference{v, r};
  return std::nullopt;
}

std::string difference_message(const std::string& name, int rank, const std::string& text_on_rank,
                               const std::string& text_on_first) {
  return fmt::format("rank {}: {} is '{}' but rank 0 has '{}': every rank must be started with the same options",
                     rank, name, text_on_rank, text_on_first);
}

void require_same_on_every_rank(const MpiWorld& world, const std::vector<AgreedValue>& values) {
  // The list itself first: ranks running different builds could agree on another set of values, and the
  // allgather below needs the same count everywhere.
  std::string names;
  for (const AgreedValue& value : values) names += value.name + '\n';
  const std::vector<int> other_list = world.ranks_differing_from_first(text_hash(names));
  require(other_list.empty(),
          "rank(s) {} check another list of options than rank 0: every rank must run the same dptrain build",
          fmt::join(other_list, ", "));

  std::vector<std::uint64_t> mine;
  mine.reserve(values.size());
  for (const AgreedValue& value : values) mine.push_back(text_hash(value.text));
  const auto difference = first_difference(world.all_gather(mine), values.size(), world.size());
  if (!difference) return;
  const AgreedValue& value = values[difference->value];
  const std::string on_first = world.broadcast(value.printed(), 0);
  const std::string on_rank = world.broadcast(value.printed(), difference->rank);
  fail("{}", difference_message(value.name, difference->rank, on_rank, on_first));
}

}  // namespace dptrain
