// ExchangeWatch: expire is called once, with the exchange's name and the limit, when an exchange outlives its
// deadline (while it still runs), and never for one that returns in time; exceptions pass through.
#include "dptrain/train/exchange_watch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dptrain {
namespace {

using namespace std::chrono_literals;

struct Expiries {
  std::mutex mutex;
  std::vector<std::string> messages;
  ExchangeWatch::Expire callback() {
    return [this](const std::string& message) {
      std::lock_guard lock(mutex);
      messages.push_back(message);
    };
  }
  std::vector<std::string> seen() {
    std::lock_guard lock(mutex);
    return messages;
  }
};

TEST(ExchangeWatch, AnExchangeThatReturnsInTimeIsNotReported) {
  Expiries expiries;
  ExchangeWatch watch(expiries.callback());
  int ran = 0;
  for (int i = 0; i < 100; ++i) watch.run("the barrier before step 1", 10, [&] { ++ran; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ran, 100);
  EXPECT_TRUE(expiries.seen().empty());
}

TEST(ExchangeWatch, AnExchangePastItsDeadlineIsReportedOnceWhileItStillRuns) {
  Expiries expiries;
  ExchangeWatch watch(expiries.callback());
  std::vector<std::string> seen_inside;
  const auto start = std::chrono::steady_clock::now();
  watch.run("the comparison of options across ranks", 0.05, [&] {
    // Blocked as a collective waiting for a peer: the report comes while it waits.
    while (expiries.seen().empty() && std::chrono::steady_clock::now() - start < 10s)
      std::this_thread::sleep_for(1ms);
    seen_inside = expiries.seen();
    std::this_thread::sleep_for(100ms);  // and only once, however long it goes on
  });
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  ASSERT_EQ(seen_inside.size(), 1u);
  EXPECT_EQ(seen_inside[0], "the comparison of options across ranks did not complete in 0.05 s");
  EXPECT_EQ(expiries.seen().size(), 1u);
  // The next exchange has a deadline of its own.
  watch.run("the barrier before step 1", 10, [] {});
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(expiries.seen().size(), 1u);
}

TEST(ExchangeWatch, AnExceptionPassesThroughAndDisarms) {
  Expiries expiries;
  ExchangeWatch watch(expiries.callback());
  EXPECT_THROW(watch.run("the link's calibration", 0.05, [] { throw std::runtime_error("MPI_ERR_TRUNCATE"); }),
               std::runtime_error);
  std::this_thread::sleep_for(100ms);  // past the deadline the exchange would have had
  EXPECT_TRUE(expiries.seen().empty());
}

}  // namespace
}  // namespace dptrain
