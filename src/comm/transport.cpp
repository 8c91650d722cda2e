// Transport's default wait_all: wait for each request in turn (a transport may override it with a batched wait).
#include "dptrain/comm/transport.hpp"

namespace dptrain {

void Transport::wait_all(std::span<Request> requests) {
  for (Request& request : requests) wait(request);
}

}  // namespace dptrain
