// A deadline on an exchange between ranks that runs outside the comm executor (the set-up's, before step 1: the
// agreement on the set-up's outcome, the comparison of options, the transport's connection, the link's calibration):
// the executor's watch ends a step's collectives that take longer than --comm-timeout, and this ends those. A rank
// stopped or gone during set-up would otherwise leave every other rank waiting for ever.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dptrain {

class ExchangeWatch {
 public:
  // Called on the watch's own thread, while the exchange is still blocked, with "<what> did not complete in S s".
  // It ends the job (MPI_Abort): the blocked call never returns otherwise.
  using Expire = std::function<void(const std::string& message)>;

  explicit ExchangeWatch(Expire expire);
  ~ExchangeWatch();
  ExchangeWatch(const ExchangeWatch&) = delete;
  ExchangeWatch& operator=(const ExchangeWatch&) = delete;

  // Runs `exchange` on the calling thread; calls expire once if it has not returned within `seconds`. Exceptions
  // pass through. One exchange at a time.
  void run(const std::string& what, double seconds, const std::function<void()>& exchange);

 private:
  void loop();

  Expire expire_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false, stopping_ = false;
  std::uint64_t generation_ = 0;  // which run() the deadline belongs to
  std::chrono::steady_clock::time_point deadline_;
  std::string message_;
  std::thread thread_;
};

}  // namespace dptrain
