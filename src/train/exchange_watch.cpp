// The exchange watch's thread: it sleeps until the armed deadline, and fires only if the same exchange is still
// running then.
#include "dptrain/train/exchange_watch.hpp"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace dptrain {

ExchangeWatch::ExchangeWatch(Expire expire) : expire_(std::move(expire)), thread_([this] { loop(); }) {}

ExchangeWatch::~ExchangeWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ExchangeWatch::run(const std::string& what, double seconds, const std::function<void()>& exchange) {
  {
    std::lock_guard lock(mutex_);
    if (armed_) throw std::logic_error("ExchangeWatch::run: one exchange at a time");
    armed_ = true;
    ++generation_;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(seconds));
    message_ = fmt::format("{} did not complete in {:g} s", what, seconds);
  }
  changed_.notify_all();
  struct Disarm {
    ExchangeWatch& watch;
    ~Disarm() {
      {
        std::lock_guard lock(watch.mutex_);
        watch.armed_ = false;
      }
      watch.changed_.notify_all();
    }
  } disarm{*this};
  exchange();
}

void ExchangeWatch::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (!armed_) {
      changed_.wait(lock);
      continue;
    }
    const std::uint64_t generation = generation_;
    const auto deadline = deadline_;
    changed_.wait_until(lock, deadline, [&] { return stopping_ || !armed_ || generation_ != generation; });
    if (stopping_ || !armed_ || generation_ != generation) continue;
    const std::string message = message_;
    armed_ = false;  // fires once per exchange
    lock.unlock();
    expire_(message);
    lock.lock();
  }
}

}  // namespace dptrain
