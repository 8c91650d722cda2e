// The Collectives front end: timing and byte accounting around every call, the factory, ring byte counts.
#include "dptrain/comm/collectives.hpp"

#include <stdexcept>

#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/comm/native.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/core/timer.hpp"

namespace dptrain {

std::byte* Scratch::get(std::size_t bytes) {
  if (bytes > capacity_) {
    data_.reset(new std::byte[bytes]);  // uninitialised on purpose: it is always written before being read
    capacity_ = bytes;
  }
  return data_.get();
}

std::uint64_t ring_bytes_sent(CollectiveOp op, std::size_t count, DType dtype, int rank, int size) {
  // Reduce-scatter sends every chunk but the rank's own (which it receives last); all-gather every chunk but
  // its right neighbour's (which comes round last).
  const std::uint64_t reduce_scatter = count - chunk_size(count, size, rank);
  const std::uint64_t all_gather = count - chunk_size(count, size, (rank + 1) % size);
  std::uint64_t elements = 0;
  switch (op) {
    case CollectiveOp::all_reduce: elements = reduce_scatter + all_gather; break;
    case CollectiveOp::reduce_scatter: elements = reduce_scatter; break;
    case CollectiveOp::all_gather: elements = all_gather; break;
  }
  return elements * element_size(dtype);
}

void Collectives::run(CollectiveOp op, void* data, std::size_t count, DType dtype) {
  const std::uint64_t sent_before = transport_.bytes_sent();
  const Stopwatch stopwatch;
  execute(op, data, count, dtype);
  const double seconds = stopwatch.seconds();
  const std::uint64_t counted = transport_.bytes_sent() - sent_before;
  log_.add(CommRecord{.op = op,
                      .algo = algorithm_,
                      .dtype = dtype,
                      .count = count,
                      .bytes = count * element_size(dtype),
                      .bytes_sent = wire_bytes(op, count, dtype, counted),
                      .seconds = seconds});
}

std::unique_ptr<Collectives> make_collectives(Algorithm algorithm, Transport& transport, ReduceAdd reduce_add) {
  switch (algorithm) {
    case Algorithm::ring: return make_ring_collectives(transport, std::move(reduce_add));
    case Algorithm::tree: return make_tree_collectives(transport, std::move(reduce_add));
    case Algorithm::native: {
      auto* mpi = dynamic_cast<MpiTransport*>(&transport);
      require(mpi != nullptr, "--allreduce: 'native' needs the MPI transport (this run uses another one)");
      return make_native_collectives(*mpi);
    }
  }
  throw std::logic_error("make_collectives: unknown algorithm");
}

}  // namespace dptrain
