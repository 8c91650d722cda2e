// NcclTransport: Transport over NCCL between GPUs, one rank per GPU (in builds with NCCL: DPTRAIN_HAVE_NCCL).
//
//   - Bootstrap over MPI: rank 0's ncclUniqueId broadcast on the communicator given, ncclCommInitRankConfig with a
//     non-blocking config by default (so that no call blocks the host and a stuck one can be ended with
//     ncclCommAbort), or a blocking one (NcclSettings::blocking: NCCL launches each group on the calling thread
//     instead of a thread it starts per group). The caller has made the rank's GPU current (cudaSetDevice by local
//     rank) first; every thread that calls the transport makes it current again.
//   - Schedules (ring, tree) run on the GroupedExecutor: each step one ncclGroupStart/End of ncclSend/ncclRecv on
//     the transport's stream, the reduce-add kernel (fp32 add, one rounding to BF16) on a second stream, events
//     between them; the host only enqueues until the collective's end.
//   - native: ncclAllReduce, ncclReduceScatter, ncclAllGather in place, on ncclBfloat16 or ncclFloat32.
//   - isend/irecv are queued and issued together, as one group, at the first wait.
// Every operation runs on `stream` after the work issued there before it, and returns when its data is final (the
// Transport contract): the host waits for the stream then, polling NCCL's asynchronous error, and ends the
// communicator (ncclCommAbort) and throws when NCCL reports an error or the operation has not finished within
// timeout_s (CommTimeout). Pointers are device pointers of the current GPU.
#pragma once
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dptrain/comm/grouped_executor.hpp"
#include "dptrain/comm/transport.hpp"

struct ncclComm;
struct CUstream_st;
struct CUevent_st;

namespace dptrain {

struct NcclSettings {
  double timeout_s = 300;  // an operation not complete by then aborts the communicator and throws
  // A blocking communicator: each ncclGroupEnd launches on the calling thread. Non-blocking (the default), NCCL
  // starts a thread per group to launch it, which costs the host tens of microseconds per ring step; blocking, a
  // call that waits on a peer (a first connection, finalizing) cannot be ended by the deadline, only by the job's
  // end (MPI_Abort, or mpirun when a rank dies).
  bool blocking = false;
};

class NcclTransport final : public Transport, private StepStreams {
 public:
  // Collective over `comm` (which outlives it): every rank of it constructs one, with its own GPU `device` and
  // `stream`.
  NcclTransport(MPI_Comm comm, int device, CUstream_st* stream, NcclSettings settings);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Request isend(int peer, const void* data, std::size_t bytes) override;
  Request irecv(int peer, void* data, std::size_t bytes) override;
  void wait(Request& request) override;
  void wait_all(std::span<Request> requests) override;

  // `reduce_add` must be this transport's reduce_add() (it enqueues on the reduce stream); scratch in device memory.
  void execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add, Scratch& scratch,
               std::size_t piece_bytes) override;

  bool has_native() const override { return true; }
  // From CUDA events recorded on the stream at the start and the end of the operation.
  std::optional<double> last_device_seconds() const override { return last_seconds_; }
  void native(CollectiveOp op, void* data, std::size_t count, DType dtype) override;

  // accumulate += incoming on the device, enqueued on the reduce stream (BF16: fp32 add, one rounding).
  ReduceAdd reduce_add();

  void abort() noexcept override;

  // NCCL's own estimate of native `op` on `count` elements at `data` (ncclGroupSimulateEnd), in seconds; nothing
  // is sent; empty where NCCL gives none. NCCL simulates on blocking communicators only (on a non-blocking one the
  // group runs for real), so the first call makes a second, blocking communicator over the ranks: collective, like
  // the constructor, on its first call.
  std::optional<double> simulated_seconds(CollectiveOp op, std::size_t count, DType dtype, void* data);

  // The NCCL library's version, e.g. "2.28.9"; the transport NCCL chose for this rank's peers is in its
  // NCCL_DEBUG=INFO output.
  static std::string version();
  // "NCCL 2.28.9, non-blocking" (or "blocking"): the transport as a run's start-up lines name it.
  std::string name() const;

 private:
  // StepStreams, for the GroupedExecutor.
  void transfers_wait_for_reduces(std::size_t step) override;
  void transfer(std::span<const Message> sends, std::span<const Message> receives) override;
  void reduces_wait_for_transfers() override;
  void record_reduces(std::size_t step) override;
  void finish() override;

  // A communicator over the ranks of mpi_comm_ into `into` (collective): rank 0's ncclUniqueId broadcast, then
  // ncclCommInitRankConfig, blocking or not.
  void connect(ncclComm*& into, bool blocking);
  int issue_native(ncclComm* comm, CollectiveOp op, void* data, std::size_t count, DType dtype);
  // Makes one NCCL call on the communicator (unless it was aborted) and waits for it to settle: in non-blocking mode
  // a call may still be in progress. Throws (after aborting) on an error or past the deadline.
  void settle(std::string_view name, const std::function<int()>& call);
  // The same for a call that settles on the communicator `polled` (read after each call: an init sets it).
  void settle(std::string_view name, ncclComm* const& polled, const std::function<int()>& call);
  // Runs `call` under the communicator's lock, after checking that no other thread has aborted it.
  int locked(std::string_view name, const std::function<int()>& call);
  // Issues the queued isend/irecv as one group.
  void flush_queued();
  // ncclGroupStart/End, settled, remembering whether this thread is inside a group (abort_and_throw closes it);
  // the lock is held in between.
  void group_start();
  void group_end();
  // A group this thread left open (an error inside it) closed, whatever ncclGroupEnd returns, and the lock it
  // holds let go; nothing where none is open.
  void close_open_group();
  // Closes, on its way out, a group that an exception left open (abort_and_throw closes its own): made right
  // after group_start().
  struct OpenGroup {
    NcclTransport& transport;
    ~OpenGroup();
  };
  // The host waits for everything issued on the stream (see the class comment for errors and the deadline).
  void complete(std::string_view what);
  // Aborts the communicator and throws Error("NCCL: <message>"): CommTimeout past the deadline, else runtime_error.
  template <typename Error>
  [[noreturn]] void abort_and_throw(const std::string& message);
  void throw_if_aborted(std::string_view what) const;
  void make_current() const;
  std::chrono::steady_clock::duration timeout() const;  // settings_.timeout_s
  void begin();  // the start of an operation: the GPU made current, the start recorded

  struct Queued {
    bool send;
    int peer;
    void* data;
    std::size_t bytes;
  };

  MPI_Comm mpi_comm_;
  ncclComm* comm_ = nullptr;
  ncclComm* simulation_comm_ = nullptr;  // blocking, for simulated_seconds() only (made by its first call)
  std::atomic<bool> aborted_{false};
  bool in_group_ = false;  // between group_start() and group_end(), on the thread issuing the operations
  // Held around every call into the communicator and by abort(): an abort from another thread (the engine's
  // watchdog) never frees the communicator under a call in progress. In non-blocking mode NCCL's calls return at
  // once, so it is held for microseconds; a blocking call may hold it while it waits on a peer, so abort() waits
  // for it a bounded time only. Recursive: an open group holds it, and each call in the group takes it again.
  std::recursive_timed_mutex calls_;
  int device_ = 0, rank_ = 0, size_ = 1;
  NcclSettings settings_;
  CUstream_st* stream_;                   // transfers and native collectives (the caller's comm stream)
  CUstream_st* reduce_stream_ = nullptr;  // the schedules' reduce-adds
  CUevent_st* transferred_ = nullptr;     // the last group's end, for the reduce stream to wait on
  CUevent_st* started_ = nullptr;         // timing: an operation's start and end on the stream
  CUevent_st* ended_ = nullptr;
  std::optional<double> last_seconds_;
  std::vector<CUevent_st*> reduced_;          // reduced_[s]: the end of step s's reduces (grown on demand, kept)
  std::size_t last_reduced_step_ = SIZE_MAX;  // in the collective running now
  std::vector<Queued> queued_;
  std::int64_t next_request_ = 0, issued_requests_ = 0;  // requests below issued_requests_ are complete
  GroupedExecutor executor_;
};

}  // namespace dptrain
