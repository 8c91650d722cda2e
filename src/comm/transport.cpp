// Transport's defaults: wait_all waits for each request in turn (a transport may batch it), and no native
// collectives; the native chunk rule every transport's native() enforces.
#include "dptrain/comm/transport.hpp"

#include <stdexcept>

#include "dptrain/core/error.hpp"

namespace dptrain {

void Transport::wait_all(std::span<Request> requests) {
  for (Request& request : requests) wait(request);
}

void Transport::native(CollectiveOp, void*, std::size_t, DType) {
  throw std::logic_error("Transport::native: this transport has no native collectives (check has_native())");
}

void require_native_chunks(CollectiveOp op, std::size_t count, int size) {
  if (op == CollectiveOp::all_reduce) return;
  require(count % static_cast<std::size_t>(size) == 0,
          "native {} needs a count divisible by the number of ranks, got count {} on {} ranks (pad it to a "
          "multiple of {}, or use ring or tree)",
          collective_op_name(op), count, size, size);
}

}  // namespace dptrain
