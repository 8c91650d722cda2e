// MpiTransport: non-blocking MPI point-to-point on a duplicated communicator.
#include "dptrain/comm/mpi_transport.hpp"

#include <sched.h>

#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  throw std::runtime_error(std::string(what) + ": " + std::string(message, length));
}

static_assert(MpiTransport::kMaxPieceBytes <= static_cast<std::size_t>(INT_MAX));

// The one tag of every message: matching is by source and posting order only.
constexpr int kTag = 0;

// DPTRAIN_MPI_SPIN_US overrides kSpinBeforeSleep (microseconds).
std::chrono::microseconds spin_before_sleep() {
  static const std::chrono::microseconds spin = [] {
    const char* value = std::getenv("DPTRAIN_MPI_SPIN_US");
    if (value == nullptr) return MpiTransport::kSpinBeforeSleep;
    long microseconds = -1;
    const char* end = value + std::strlen(value);
    const auto [at, error] = std::from_chars(value, end, microseconds);
    require(error == std::errc() && at == end && microseconds >= 0 && microseconds <= 10'000'000,
            "DPTRAIN_MPI_SPIN_US is '{}': expected whole microseconds from 0 to 10000000", value);
    return std::chrono::microseconds(microseconds);
  }();
  return spin;
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm, std::size_t max_piece_bytes) : max_piece_bytes_(max_piece_bytes) {
  DP_ASSERT(max_piece_bytes > 0 && max_piece_bytes <= kMaxPieceBytes);
  check_environment();  // before MPI_Comm_dup, a collective
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  wait_policy_ = wait_policy_from_environment();
}

void MpiTransport::check_environment() {
  wait_policy_from_environment();
  spin_before_sleep();  // read and checked in the set-up rather than first inside a collective
}

MpiTransport::WaitPolicy MpiTransport::wait_policy_from_environment() {
  const char* value = std::getenv("DPTRAIN_MPI_WAIT");
  if (value == nullptr || std::string(value) == "sleep") return WaitPolicy::sleep;
  if (std::string(value) == "spin") return WaitPolicy::spin;
  if (std::string(value) == "yield") return WaitPolicy::yield;
  fail("DPTRAIN_MPI_WAIT is '{}': expected spin, yield or sleep (or leave it unset: sleep)", value);
}

// Every request of `pieces` complete, waiting as the policy says. Each MPI_Testsome also progresses MPI (moves
// the shared-memory fragments of large messages, which needs both ends to poll), so the sleeping wait polls while
// pieces keep completing — data is moving — and backs off only once none has completed for kSpinBeforeSleep.
// (With MPI_Testall, which sees only the whole, a 16 MiB message moved at 0.4 GB/s instead of 6: every fragment
// waited for a sleep.)
void MpiTransport::wait_pieces(std::span<MPI_Request> pieces) {
  const int count = static_cast<int>(pieces.size());
  if (wait_policy_ == WaitPolicy::spin) {
    check(MPI_Waitall(count, pieces.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    return;
  }
  using clock = std::chrono::steady_clock;
  clock::time_point progressed = clock::now();
  std::chrono::microseconds sleep{5};
  completed_indices_.resize(pieces.size());
  for (;;) {
    int completed = 0;
    check(MPI_Testsome(count, pieces.data(), &completed, completed_indices_.data(), MPI_STATUSES_IGNORE),
          "MPI_Testsome");
    if (completed == MPI_UNDEFINED) return;  // every request is MPI_REQUEST_NULL: all complete
    if (completed > 0) {
      progressed = clock::now();
      sleep = std::chrono::microseconds(5);
    }
    if (wait_policy_ == WaitPolicy::yield || clock::now() - progressed < spin_before_sleep()) {
      if (wait_policy_ == WaitPolicy::yield) sched_yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Claims a slot and posts one MPI request per piece of at most max_piece_bytes_ (zero bytes: one empty message,
// so a zero-byte send still matches a zero-byte receive).
template <typename Post>
Request MpiTransport::post(std::size_t bytes, Post&& post_piece) {
  std::int64_t id;
  if (!free_slots_.empty()) {
    id = free_slots_.back();
    free_slots_.pop_back();
  } else {
    id = static_cast<std::int64_t>(slots_.size());
    slots_.emplace_back();
  }
  std::vector<MPI_Request>& pieces = slots_[id];
  pieces.clear();
  std::size_t offset = 0;
  do {
    const std::size_t piece = std::min(bytes - offset, max_piece_bytes_);
    pieces.push_back(MPI_REQUEST_NULL);
    post_piece(offset, static_cast<int>(piece), &pieces.back());
    offset += piece;
  } while (offset < bytes);
  return Request{id};
}

Request MpiTransport::isend(int peer, const void* data, std::size_t bytes) {
  DP_ASSERT(peer >= 0 && peer < size_);
  count_sent(bytes);
  const auto* base = static_cast<const std::byte*>(data);
  return post(bytes, [&](std::size_t offset, int piece, MPI_Request* request) {
    check(MPI_Isend(base + offset, piece, MPI_BYTE, peer, kTag, comm_, request), "MPI_Isend");
  });
}

Request MpiTransport::irecv(int peer, void* data, std::size_t bytes) {
  DP_ASSERT(peer >= 0 && peer < size_);
  auto* base = static_cast<std::byte*>(data);
  return post(bytes, [&](std::size_t offset, int piece, MPI_Request* request) {
    check(MPI_Irecv(base + offset, piece, MPI_BYTE, peer, kTag, comm_, request), "MPI_Irecv");
  });
}

std::vector<MPI_Request>& MpiTransport::slot_of(const Request& request) {
  DP_ASSERT(request.id >= 0 && request.id < static_cast<std::int64_t>(slots_.size()));
  return slots_[request.id];
}

void MpiTransport::release(Request& request) {
  free_slots_.push_back(request.id);
  request.id = -1;
}

void MpiTransport::wait(Request& request) {
  if (!request.active()) return;
  wait_pieces(slot_of(request));
  release(request);
}

// One MPI_Waitall over every piece of every request lets MPI progress them all together.
void MpiTransport::wait_all(std::span<Request> requests) {
  wait_scratch_.clear();
  for (const Request& request : requests) {
    if (!request.active()) continue;
    const std::vector<MPI_Request>& pieces = slot_of(request);
    wait_scratch_.insert(wait_scratch_.end(), pieces.begin(), pieces.end());
  }
  wait_pieces(wait_scratch_);
  for (Request& request : requests) {
    if (request.active()) release(request);
  }
}

void MpiTransport::execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add,
                           Scratch& scratch, std::size_t piece_bytes) {
  executor_.run(*this, schedule, data, dtype, reduce_add, scratch, piece_bytes);
}

}  // namespace dptrain
