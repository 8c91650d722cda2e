// The `native` Collectives: the transport's library's own collectives (Transport::native), timed and accounted
// like the others. The library's own traffic is invisible, so the log records what the ring would send.
#include "dptrain/comm/collectives.hpp"

namespace dptrain {
namespace {

class NativeCollectives final : public Collectives {
 public:
  explicit NativeCollectives(Transport& transport) : Collectives(Algorithm::native, transport) {}

 protected:
  std::optional<double> execute(CollectiveOp op, void* data, std::size_t count, DType dtype) override {
    transport_.native(op, data, count, dtype);
    return transport_.last_device_seconds();
  }

  std::uint64_t wire_bytes(CollectiveOp op, std::size_t count, DType dtype, std::uint64_t) const override {
    return ring_bytes_sent(op, count, dtype, rank(), size());
  }
};

}  // namespace

std::unique_ptr<Collectives> make_native_collectives(Transport& transport) {
  return std::make_unique<NativeCollectives>(transport);
}

}  // namespace dptrain
