// The Collectives front end: timing and byte accounting around every call, the factory, ring byte counts.
#include "dptrain/comm/collectives.hpp"

#include "dptrain/core/error.hpp"
#include "dptrain/core/timer.hpp"

namespace dptrain {

std::uint64_t ring_bytes_sent(CollectiveOp op, std::size_t count, DType dtype, int rank, int size) {
  // Reduce-scatter sends every chunk but the rank's own (which it receives last); all-gather every chunk but
  // its right neighbour's (which comes round last).
  const std::uint64_t reduce_scatter = count - chunk_size(count, size, rank);
  const std::uint64_t all_gather = count - chunk_size(count, size, (rank + 1) % size);
  std::uint64_t elements = 0;
  switch (op) {
    case CollectiveOp::all_reduce:
      elements = reduce_scatter + all_gather;
      break;
    case CollectiveOp::reduce_scatter:
      elements = reduce_scatter;
      break;
    case CollectiveOp::all_gather:
      elements = all_gather;
      break;
  }
  return elements * element_size(dtype);
}

void Collectives::run(CollectiveOp op, void* data, std::size_t count, DType dtype) {
  const std::uint64_t sent_before = transport_.bytes_sent();
  const double entry = now_seconds();
  // A device transport's own timing: the collective's time on the device, placed on the host clock as ending when
  // the host saw it end (so the ranks' entries still compare; collective_skew.hpp).
  const std::optional<double> on_device = execute(op, data, count, dtype);
  const double exit = now_seconds();
  const double seconds = on_device ? *on_device : exit - entry;
  const std::uint64_t counted = transport_.bytes_sent() - sent_before;
  log_.add(CommRecord{.op = op,
                      .algo = algorithm_,
                      .dtype = dtype,
                      .count = count,
                      .bytes = count * element_size(dtype),
                      .bytes_sent = wire_bytes(op, count, dtype, counted),
                      .seconds = seconds,
                      .entry_s = on_device ? exit - seconds : entry,
                      .exit_s = exit,
                      .transfer_s = seconds});
}

std::unique_ptr<Collectives> make_collectives(Algorithm algorithm, Transport& transport, ReduceAdd reduce_add,
                                              Memory& scratch_memory, std::size_t ring_piece_bytes) {
  if (algorithm != Algorithm::native) {
    return make_scheduled_collectives(algorithm, transport, std::move(reduce_add), scratch_memory, ring_piece_bytes);
  }
  require(transport.has_native(),
          "--allreduce: 'native' needs a transport with its own collectives (this run's transport has none)");
  return make_native_collectives(transport);
}

}  // namespace dptrain
