// The start-up check that every rank was started with the same options and data. Ranks exchange one hash per
// agreed value; when some differ, the first differing value's text travels to every rank, so all of them fail
// with the same line naming the option, the differing rank and both values (a rank with another --save or
// --link would otherwise wait forever in a collective the others never enter).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/option_table.hpp"

namespace dptrain {

// The first value (in list order) that some rank holds differently from rank 0, and the lowest such rank.
// `hashes` is every rank's hash of every value, rank after rank: hashes[rank · values + value].
struct Difference {
  std::size_t value = 0;
  int rank = 0;
};
std::optional<Difference> first_difference(const std::vector<std::uint64_t>& hashes, std::size_t values, int ranks);

// "rank 1: --save is 'b' but rank 0 has 'a': every rank must be started with the same options".
std::string difference_message(const std::string& name, int rank, const std::string& text_on_rank,
                               const std::string& text_on_first);

// Collective. Throws UserError (the same message on every rank) when a value differs from rank 0's; all ranks
// must pass the same names in the same order.
void require_same_on_every_rank(const MpiWorld& world, const std::vector<AgreedValue>& values);

}  // namespace dptrain
