// Ring reduce-scatter and all-gather as schedules. Rank r sends to r+1 and receives from r−1; round s moves one
// chunk each way, so a chunk travels once around the ring per phase. Each chunk is one message here; the
// executor splits it into pieces and forwards each piece as soon as it is ready (point_to_point_executor.hpp).
#include "dptrain/comm/chunks.hpp"
#include "dptrain/comm/schedule.hpp"

namespace dptrain {
namespace {

int modulo(int a, int p) { return ((a % p) + p) % p; }

ElementRange chunk(std::size_t count, int size, int c) {
  return ElementRange{chunk_begin(count, size, c), chunk_size(count, size, c)};
}

// The ring's two phases differ only in which chunk round s sends (r − s − send_lag), which it receives (one
// behind) and whether it adds it in.
Schedule ring_schedule(int rank, int size, std::size_t count, int send_lag, bool reduce) {
  Schedule schedule;
  if (size == 1) return schedule;
  const int right = modulo(rank + 1, size), left = modulo(rank - 1, size);
  for (int s = 0; s < size - 1; ++s) {
    Round& round = schedule.add_round();
    const ElementRange out = chunk(count, size, modulo(rank - s - send_lag, size));
    const ElementRange in = chunk(count, size, modulo(rank - s - send_lag - 1, size));
    if (out.count > 0) round.sends.push_back({right, out});
    if (in.count > 0) round.receives.push_back({left, in, reduce});
  }
  schedule.finish();
  return schedule;
}

}  // namespace

// Round s sends chunk r−s−1 (from round 1 on, the one summed in round s−1) and adds in chunk r−s−2; the last
// round (s = p−2) receives chunk r, so rank r ends owning its own chunk. Chunk c therefore starts at rank c+1 and
// is added at c+2, c+3, …, c in that order: the order of addition the inexact-ring test holds every ring to.
Schedule ring_reduce_scatter_schedule(int rank, int size, std::size_t count) {
  return ring_schedule(rank, size, count, /*send_lag=*/1, /*reduce=*/true);
}

// Round s sends chunk r−s (its own first, then the one received in round s−1) and receives chunk r−s−1 in place.
Schedule ring_all_gather_schedule(int rank, int size, std::size_t count) {
  return ring_schedule(rank, size, count, /*send_lag=*/0, /*reduce=*/false);
}

}  // namespace dptrain
