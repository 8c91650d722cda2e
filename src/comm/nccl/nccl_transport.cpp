// NcclTransport: NCCL bootstrap over MPI, schedules as grouped steps on two streams, NCCL's own collectives, and
// the wait at the end of each operation that watches for NCCL's errors and the deadline.
#include "dptrain/comm/nccl_transport.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include "dptrain/core/cuda_check.hpp"
#include "dptrain/core/error.hpp"
#include "reduce_add_launch.hpp"

namespace dptrain {
namespace {

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::bf16 ? ncclBfloat16 : ncclFloat32; }

// How long complete() polls the end of an operation before it starts sleeping between polls.
constexpr std::chrono::microseconds kSpinBeforeSleeping{200};
// How long abort() waits for a call in progress on another thread to return.
constexpr std::chrono::seconds kAbortWaitsForACall{2};
// How long abort() waits for ncclCommAbort itself: it can wait for the peers' own aborts (NCCL's proxy thread
// stays while other ranks of the node are connected to it), and the job's end must not wait for them.
constexpr std::chrono::seconds kAbortWaitsForTheLibrary{3};

// ncclCommAbort on `comm`, on a thread of its own, waited for at most kAbortWaitsForTheLibrary: past that it is
// left running, and the process's end (MPI_Abort follows every abort) ends it.
void abort_bounded(ncclComm* comm, int device) noexcept {
  try {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([comm, device, done] {
      cudaSetDevice(device);  // unchecked: the abort is all that is left to do
      ncclCommAbort(comm);
      done->set_value();
    }).detach();
    finished.wait_for(kAbortWaitsForTheLibrary);
  } catch (...) {  // no thread could be made: abort on this one
    ncclCommAbort(comm);
  }
}

}  // namespace

NcclTransport::NcclTransport(MPI_Comm comm, int device, CUstream_st* stream, NcclSettings settings)
    : mpi_comm_(comm), device_(device), settings_(settings), stream_(stream) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  make_current();
  // Non-blocking, calls return at once and settle() waits, watching the deadline, and can abort.
  connect(comm_, settings_.blocking);
  DP_CUDA(cudaStreamCreateWithFlags(&reduce_stream_, cudaStreamNonBlocking));
  DP_CUDA(cudaEventCreateWithFlags(&transferred_, cudaEventDisableTiming));
  DP_CUDA(cudaEventCreate(&started_));
  DP_CUDA(cudaEventCreate(&ended_));
}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);               // unchecked: a destructor must not throw
  // Destroyed while an exception unwinds (a failed rank on its way to MPI_Abort): the peers may be inside a
  // collective that will never complete, so finalizing would wait for the deadline; abort at once instead.
  if (std::uncaught_exceptions() > 0) abort();
  if (comm_ != nullptr && !aborted_) {  // every operation completed before it returned; the stream may be gone
    // Finalizing may need the peers; one that died must not keep this rank from exiting: after the deadline the
    // communicator is aborted instead.
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    ncclResult_t state = ncclCommFinalize(comm_);
    while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline &&
           ncclCommGetAsyncError(comm_, &state) == ncclSuccess)
      std::this_thread::yield();
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      aborted_ = true;  // the estimates' communicator below is aborted too: the peers may be gone
      abort_bounded(comm_, device_);
    }
  }
  if (simulation_comm_ != nullptr) {  // blocking, and never given any work
    if (aborted_)
      abort_bounded(simulation_comm_, device_);
    else
      ncclCommDestroy(simulation_comm_);
  }
  for (CUevent_st* event : reduced_) cudaEventDestroy(event);
  for (CUevent_st* event : {transferred_, started_, ended_})
    if (event != nullptr) cudaEventDestroy(event);
  if (reduce_stream_ != nullptr) cudaStreamDestroy(reduce_stream_);
}

void NcclTransport::connect(ncclComm*& into, bool blocking) {
  // Rank 0's id and whether it got one: a rank 0 that failed must not leave the others waiting in the broadcast.
  struct {
    ncclUniqueId id;
    int result;
  } hello{};
  if (rank_ == 0) hello.result = int(ncclGetUniqueId(&hello.id));
  MPI_Bcast(&hello, sizeof(hello), MPI_BYTE, 0, mpi_comm_);
  if (hello.result != ncclSuccess)
    throw std::runtime_error(
        fmt::format("NCCL: ncclGetUniqueId failed on rank 0: {}", ncclGetErrorString(ncclResult_t(hello.result))));
  const ncclUniqueId& id = hello.id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  settle("ncclCommInitRankConfig", into, [&] {
    ncclComm_t nccl = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&nccl, size_, id, rank_, &config);
    into = nccl;  // set even while in progress: settle() polls it
    return int(init);
  });
}

std::string NcclTransport::version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

std::string NcclTransport::name() const {
  return fmt::format("NCCL {}, {}", version(), settings_.blocking ? "blocking" : "non-blocking");
}

std::chrono::steady_clock::duration NcclTransport::timeout() const {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(settings_.timeout_s));
}

void NcclTransport::make_current() const { DP_CUDA(cudaSetDevice(device_)); }

void NcclTransport::begin() {
  make_current();
  last_seconds_.reset();  // until complete() has timed this operation
  DP_CUDA(cudaEventRecord(started_, stream_));
}

void NcclTransport::abort() noexcept {
  // A blocking call that waits on a peer may hold the lock for good: then the communicator is left as it is, and
  // the job's end (MPI_Abort follows every abort) ends the call with the process.
  std::unique_lock lock(calls_, std::defer_lock);
  if (!lock.try_lock_for(kAbortWaitsForACall)) return;
  if (comm_ != nullptr && !aborted_.exchange(true)) abort_bounded(comm_, device_);
}

int NcclTransport::locked(std::string_view name, const std::function<int()>& call) {
  const std::lock_guard lock(calls_);
  throw_if_aborted(name);
  return call();
}

template <typename Error>
[[noreturn]] void NcclTransport::abort_and_throw(const std::string& message) {
  // An abort inside an open group would only be queued until the group ends (ncclCommAbort is a group operation
  // itself): close the group first, whatever it returns.
  close_open_group();
  abort();
  throw Error(fmt::format("NCCL: {}", message));
}

// Another thread (a watchdog) aborted the communicator: nothing may touch it any more.
void NcclTransport::throw_if_aborted(std::string_view what) const {
  if (aborted_) throw std::runtime_error(fmt::format("NCCL: {} ended by an abort", what));
}

void NcclTransport::settle(std::string_view name, const std::function<int()>& call) { settle(name, comm_, call); }

void NcclTransport::settle(std::string_view name, ncclComm* const& polled, const std::function<int()>& call) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout();
  auto state = static_cast<ncclResult_t>(locked(name, call));
  while (state == ncclInProgress) {
    if (clock::now() > deadline)
      abort_and_throw<CommTimeout>(fmt::format("{} did not settle in {:g} s", name, settings_.timeout_s));
    std::this_thread::yield();
    state = static_cast<ncclResult_t>(locked(name, [&] {
      ncclResult_t now = ncclInProgress;
      return int(ncclCommGetAsyncError(polled, &now) == ncclSuccess ? now : ncclInternalError);
    }));
  }
  if (state != ncclSuccess) {
    std::string detail;
    if (polled != nullptr)
      locked(name, [&] {
        detail = ncclGetLastError(polled);
        return 0;
      });
    abort_and_throw<std::runtime_error>(fmt::format("{} failed: {} ({})", name, ncclGetErrorString(state), detail));
  }
}

void NcclTransport::complete(std::string_view what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  DP_CUDA(cudaEventRecord(ended_, stream_));
  std::chrono::microseconds pause{1};
  for (;;) {
    const cudaError_t done = cudaEventQuery(ended_);
    if (done == cudaSuccess) {
      throw_if_aborted(what);  // an abort from another thread ends the kernels too: the data is not final
      float milliseconds = 0;
      DP_CUDA(cudaEventElapsedTime(&milliseconds, started_, ended_));
      last_seconds_ = 1e-3 * double(milliseconds);
      return;
    }
    if (done != cudaErrorNotReady) DP_CUDA(done);
    std::string error;
    locked(what, [&] {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress)
        error = fmt::format("{} ({})", ncclGetErrorString(state), ncclGetLastError(comm_));
      return 0;
    });
    if (!error.empty()) abort_and_throw<std::runtime_error>(fmt::format("{} failed: {}", what, error));
    const auto elapsed = clock::now() - start;
    if (elapsed > timeout())
      abort_and_throw<CommTimeout>(fmt::format("{} did not complete in {:g} s", what, settings_.timeout_s));
    // Poll without sleeping at first: a sleep lasts at least the thread's timer slack (50 µs by default), which
    // would end a short collective that much later on the host (and leave the stream idle until the next one).
    // Then back off: the compute thread needs the core.
    if (elapsed < kSpinBeforeSleeping) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
  }
}

// ---- point to point ---------------------------------------------------------------------------------------------

Request NcclTransport::isend(int peer, const void* data, std::size_t bytes) {
  DP_ASSERT(peer >= 0 && peer < size_);
  count_sent(bytes);
  queued_.push_back({true, peer, const_cast<void*>(data), bytes});
  return Request{next_request_++};
}

Request NcclTransport::irecv(int peer, void* data, std::size_t bytes) {
  DP_ASSERT(peer >= 0 && peer < size_);
  queued_.push_back({false, peer, data, bytes});
  return Request{next_request_++};
}

void NcclTransport::flush_queued() {
  if (queued_.empty()) return;
  begin();
  group_start();
  const OpenGroup closes_on_error{*this};
  for (const Queued& q : queued_) {
    settle(q.send ? "ncclSend" : "ncclRecv", [&] {
      return int(q.send ? ncclSend(q.data, q.bytes, ncclUint8, q.peer, comm_, stream_)
                        : ncclRecv(q.data, q.bytes, ncclUint8, q.peer, comm_, stream_));
    });
  }
  group_end();
  queued_.clear();
  issued_requests_ = next_request_;
  complete("send/receive");
}

void NcclTransport::wait(Request& request) {
  if (!request.active()) return;
  if (request.id >= issued_requests_) flush_queued();
  request.id = -1;
}

void NcclTransport::wait_all(std::span<Request> requests) {
  for (Request& request : requests) wait(request);
}

// ---- schedules: StepStreams -------------------------------------------------------------------------------------

void NcclTransport::execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add,
                            Scratch& scratch, std::size_t piece_bytes) {
  begin();
  last_reduced_step_ = SIZE_MAX;
  executor_.run(*this, schedule, data, dtype, reduce_add, scratch, piece_bytes);
}

ReduceAdd NcclTransport::reduce_add() {
  return [this](void* accumulate, const void* incoming, std::size_t count, DType dtype) {
    launch_reduce_add(reduce_stream_, accumulate, incoming, count, dtype);
  };
}

void NcclTransport::transfers_wait_for_reduces(std::size_t step) {
  DP_CUDA(cudaStreamWaitEvent(stream_, reduced_.at(step), 0));
}

void NcclTransport::transfer(std::span<const Message> sends, std::span<const Message> receives) {
  group_start();
  const OpenGroup closes_on_error{*this};
  for (const Message& m : sends) {
    count_sent(m.bytes);
    settle("ncclSend", [&] { return int(ncclSend(m.data, m.bytes, ncclUint8, m.peer, comm_, stream_)); });
  }
  for (const Message& m : receives)
    settle("ncclRecv", [&] { return int(ncclRecv(m.data, m.bytes, ncclUint8, m.peer, comm_, stream_)); });
  group_end();
}

// The lock is held from ncclGroupStart until ncclGroupEnd has returned, so that an abort from another thread never
// meets an open group (it would free the communicator the group still lists); waiting for the group to settle
// happens after, with the lock taken per poll as for any call.
void NcclTransport::group_start() {
  calls_.lock();
  if (aborted_) {
    calls_.unlock();
    throw_if_aborted("ncclGroupStart");
  }
  if (const ncclResult_t started = ncclGroupStart(); started != ncclSuccess) {
    calls_.unlock();
    abort_and_throw<std::runtime_error>(fmt::format("ncclGroupStart failed: {}", ncclGetErrorString(started)));
  }
  in_group_ = true;
}

void NcclTransport::group_end() {
  in_group_ = false;
  const int ended = int(ncclGroupEnd());
  calls_.unlock();
  settle("ncclGroupEnd", [ended] { return ended; });
}

void NcclTransport::close_open_group() {
  if (!std::exchange(in_group_, false)) return;
  ncclGroupEnd();
  calls_.unlock();
}

NcclTransport::OpenGroup::~OpenGroup() { transport.close_open_group(); }

void NcclTransport::reduces_wait_for_transfers() {
  DP_CUDA(cudaEventRecord(transferred_, stream_));
  DP_CUDA(cudaStreamWaitEvent(reduce_stream_, transferred_, 0));
}

void NcclTransport::record_reduces(std::size_t step) {
  while (reduced_.size() <= step) {
    CUevent_st* event = nullptr;
    DP_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    reduced_.push_back(event);
  }
  DP_CUDA(cudaEventRecord(reduced_[step], reduce_stream_));
  last_reduced_step_ = step;
}

void NcclTransport::finish() {
  if (last_reduced_step_ != SIZE_MAX) DP_CUDA(cudaStreamWaitEvent(stream_, reduced_[last_reduced_step_], 0));
  complete("schedule");
}

// ---- native -----------------------------------------------------------------------------------------------------

// Enqueues NCCL's own `op` in place (the call's result, unsettled): reduce-scatter leaves the sum of chunk r in
// chunk r, all-gather reads it there.
int NcclTransport::issue_native(ncclComm* comm, CollectiveOp op, void* data, std::size_t count, DType dtype) {
  const std::size_t chunk = count / std::size_t(size_);
  auto* own = static_cast<std::byte*>(data) + std::size_t(rank_) * chunk * element_size(dtype);
  switch (op) {
    case CollectiveOp::all_reduce:
      return int(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm, stream_));
    case CollectiveOp::reduce_scatter:
      return int(ncclReduceScatter(data, own, chunk, nccl_type(dtype), ncclSum, comm, stream_));
    case CollectiveOp::all_gather:
      return int(ncclAllGather(own, data, chunk, nccl_type(dtype), comm, stream_));
  }
  return int(ncclInvalidArgument);
}

void NcclTransport::native(CollectiveOp op, void* data, std::size_t count, DType dtype) {
  require_native_chunks(op, count, size_);
  begin();
  settle(collective_op_name(op), [&] { return issue_native(comm_, op, data, count, dtype); });
  complete(collective_op_name(op));
}

std::optional<double> NcclTransport::simulated_seconds(CollectiveOp op, std::size_t count, DType dtype, void* data) {
  require_native_chunks(op, count, size_);
  make_current();
  if (simulation_comm_ == nullptr) connect(simulation_comm_, /*blocking=*/true);
  // On the blocking communicator every call returns its result: a failure gives no estimate and leaves the
  // transport's own communicator as it was.
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  const int simulated = locked("ncclGroupSimulateEnd", [&] {
    if (ncclGroupStart() != ncclSuccess) return int(ncclInternalError);
    const int issued = issue_native(simulation_comm_, op, data, count, dtype);
    const int ended = int(ncclGroupSimulateEnd(&info));
    return issued != ncclSuccess ? issued : ended;
  });
  if (simulated != ncclSuccess || !(info.estimatedTime >= 0)) return std::nullopt;
  return double(info.estimatedTime) * 1e-6;  // NCCL's tuning model counts microseconds
}

}  // namespace dptrain
