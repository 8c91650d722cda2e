// NCCL on the CPU over MPI, with the reduce-add launch of src/comm/nccl/ (fake_nccl.hpp says what it models).
#include "fake_nccl.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../../src/comm/nccl/reduce_add_launch.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/reduce_add.hpp"

struct ncclComm {
  int rank = 0, size = 1;
  bool blocking = true;
  MPI_Comm mpi = MPI_COMM_NULL;
  std::atomic<int> polls_in_progress{0};  // ncclCommGetAsyncError answers ncclInProgress this many more times
  // A non-blocking group's work, queued on its stream only when the call settles (by NCCL's launch thread): work
  // the caller queues on the stream before that would run first.
  std::function<void()> launch;
  std::mutex mutex;
  std::condition_variable aborted_changed;
  bool aborted = false;
};

namespace {

std::atomic<int> polls_per_call{2};
std::atomic<bool> stall_next{false};
std::atomic<int> async_error{ncclSuccess};
std::atomic<double> group_end_hold_s{0};
std::atomic<int> abort_count{0};
std::atomic<int> forbidden_calls{0};
std::atomic<int> holding{0};  // threads inside a held ncclGroupEnd
std::atomic<double> send_hold_s{0};
std::atomic<int> holding_send{0};  // threads inside a held ncclSend
std::atomic<double> abort_hold_s{0};
std::atomic<int> open_groups{0};  // threads between ncclGroupStart and the ncclGroupEnd that closes the group
std::atomic<int> aborts_in_open_group{0};
std::atomic<long> groups_issued{0};

// FAKE_NCCL_STALL_GROUP=N: the N-th group this process issues stalls (for programs run whole, such as dpbench).
long stalled_group() {
  static const long n = [] {
    const char* text = std::getenv("FAKE_NCCL_STALL_GROUP");
    return text != nullptr ? std::atol(text) : 0L;
  }();
  return n;
}

std::size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclUint8:
      return 1;
    case ncclBfloat16:
      return 2;
    case ncclFloat32:
      return 4;
    default:
      throw std::invalid_argument("fake NCCL: a type the transport does not use");
  }
}

// One call queued in the open group.
struct Call {
  enum Kind { send, recv, all_reduce, reduce_scatter, all_gather } kind;
  const void* input;
  void* output;
  std::size_t count;  // elements: of the message, of the whole reduction, of the chunk scattered or gathered
  ncclDataType_t type;
  int peer;
  ncclComm* comm;
  cudaStream_t stream;
};

thread_local int group_depth = 0;
thread_local std::vector<Call> group;

// A call on a non-blocking communicator before its last call settled: NCCL forbids it.
void note_call(ncclComm* comm) {
  if (comm != nullptr && comm->polls_in_progress.load() > 0) ++forbidden_calls;
}

// A non-blocking call starts in progress; `launch` runs when it settles.
void start_progress(ncclComm* comm, std::function<void()> launch = {}) {
  comm->polls_in_progress = polls_per_call.load();
  comm->launch = std::move(launch);
  if (comm->polls_in_progress == 0 && comm->launch) std::exchange(comm->launch, {})();
}

void wait_for_abort(ncclComm* comm) {
  std::unique_lock lock(comm->mutex);
  comm->aborted_changed.wait(lock, [&] { return comm->aborted; });
}

bool is_aborted(ncclComm* comm) {
  const std::lock_guard lock(comm->mutex);
  return comm->aborted;
}

float element(const std::byte* data, ncclDataType_t type, std::size_t i) {
  if (type == ncclFloat32) return reinterpret_cast<const float*>(data)[i];
  return dptrain::to_float(reinterpret_cast<const dptrain::bf16*>(data)[i]);
}

void store(std::byte* data, ncclDataType_t type, std::size_t i, float value) {
  if (type == ncclFloat32)
    reinterpret_cast<float*>(data)[i] = value;
  else
    reinterpret_cast<dptrain::bf16*>(data)[i] = dptrain::to_bf16(value);
}

// Every rank's `count` elements at `input`, gathered in rank order.
std::vector<std::byte> gather(const Call& c, std::size_t count) {
  const std::size_t bytes = count * type_size(c.type);
  std::vector<std::byte> all(bytes * std::size_t(c.comm->size));
  MPI_Allgather(c.input, int(bytes), MPI_BYTE, all.data(), int(bytes), MPI_BYTE, c.comm->mpi);
  return all;
}

// output[i] = Σ_q rank q's input[offset + i], in fp32, rounded once.
void sum_into(const Call& c, const std::vector<std::byte>& all, std::size_t per_rank, std::size_t offset,
              std::size_t count) {
  const std::size_t stride = per_rank * type_size(c.type);
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int q = 0; q < c.comm->size; ++q) sum += element(all.data() + std::size_t(q) * stride, c.type, offset + i);
    store(static_cast<std::byte*>(c.output), c.type, i, sum);
  }
}

// Runs a group's calls, on its stream: the sends and receives together, then the collectives.
void run_group(const std::vector<Call>& calls) {
  std::vector<MPI_Request> requests;
  for (const Call& c : calls) {
    const int bytes = int(c.count * type_size(c.type));
    if (c.kind == Call::send) MPI_Isend(c.input, bytes, MPI_BYTE, c.peer, 0, c.comm->mpi, &requests.emplace_back());
    if (c.kind == Call::recv) MPI_Irecv(c.output, bytes, MPI_BYTE, c.peer, 0, c.comm->mpi, &requests.emplace_back());
  }
  MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  for (const Call& c : calls) {
    const std::size_t p = std::size_t(c.comm->size), r = std::size_t(c.comm->rank);
    if (c.kind == Call::all_reduce) sum_into(c, gather(c, c.count), c.count, 0, c.count);
    if (c.kind == Call::reduce_scatter) sum_into(c, gather(c, c.count * p), c.count * p, r * c.count, c.count);
    if (c.kind == Call::all_gather) {
      const std::vector<std::byte> all = gather(c, c.count);
      std::memcpy(c.output, all.data(), all.size());
    }
  }
}

ncclResult_t add(Call call) {
  note_call(call.comm);
  if (group_depth > 0) {
    group.push_back(call);
    return ncclSuccess;
  }
  ncclGroupStart();  // outside a group, a call is a group of its own
  group.push_back(call);
  return ncclGroupEnd();
}

}  // namespace

namespace fake_nccl {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
void set_polls_in_progress(int polls) { polls_per_call = polls; }
void stall_next_group() { stall_next = true; }
void set_async_error(ncclResult_t error) { async_error = error; }
void set_blocking_group_end_seconds(double seconds) { group_end_hold_s = seconds; }
void set_send_seconds(double seconds) { send_hold_s = seconds; }
bool in_held_send() { return holding_send > 0; }
void set_abort_seconds(double seconds) { abort_hold_s = seconds; }
int aborts_while_a_group_was_open() { return aborts_in_open_group; }
int aborts() { return abort_count; }
int calls_while_in_progress() { return forbidden_calls; }
bool in_held_group_end() { return holding > 0; }

}  // namespace fake_nccl

// The transport's reduce-add launch: host_reduce_add (fp32 add, one rounding) on the stream.
void dptrain::launch_reduce_add(cudaStream_t stream, void* accumulate, const void* incoming, std::size_t count,
                                DType dtype) {
  fake_cuda::enqueue(stream, [=] { host_reduce_add(accumulate, incoming, count, dtype); });
}

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  std::strcpy(id->internal, "fake");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (std::strcmp(id.internal, "fake") != 0) return ncclInvalidArgument;  // not rank 0's id
  auto* c = new ncclComm;
  c->rank = rank;
  c->size = nranks;
  c->blocking = config->blocking != 0;  // NCCL_CONFIG_UNDEF_INT (the default) is blocking too
  MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
  *comm = c;
  if (c->blocking) return ncclSuccess;
  start_progress(c);
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (async_error != ncclSuccess) {
    *state = ncclResult_t(async_error.load());
  } else if (comm->polls_in_progress.load() > 0) {
    if (--comm->polls_in_progress == 0 && comm->launch) std::exchange(comm->launch, {})();
    *state = ncclInProgress;
  } else {
    *state = ncclSuccess;
  }
  return ncclSuccess;
}

const char* ncclGetLastError(ncclComm_t) { return async_error != ncclSuccess ? "fake NCCL: injected error" : ""; }

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclInProgress:
      return "operation in progress";
    default:
      return "some other error";
  }
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  note_call(comm);
  if (comm->blocking) return ncclSuccess;
  start_progress(comm);
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  note_call(comm);
  MPI_Comm_free(&comm->mpi);
  return ncclSuccess;  // the struct is kept: items queued on a stream may still refer to it
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ++abort_count;
  if (open_groups > 0) ++aborts_in_open_group;
  {
    const std::lock_guard lock(comm->mutex);
    comm->aborted = true;
  }
  comm->aborted_changed.notify_all();
  std::this_thread::sleep_for(std::chrono::duration<double>(abort_hold_s.load()));
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  if (group_depth++ == 0) {
    group.clear();
    ++open_groups;
  }
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  --open_groups;
  if (group.empty()) return ncclSuccess;
  std::vector<Call> calls;
  calls.swap(group);
  ncclComm* comm = calls.front().comm;
  cudaStream_t stream = calls.front().stream;
  for (const Call& c : calls)
    if (c.comm != comm || c.stream != stream) return ncclInvalidUsage;  // not used by the transport
  if (comm->blocking && group_end_hold_s > 0) {
    ++holding;
    std::this_thread::sleep_for(std::chrono::duration<double>(group_end_hold_s.load()));
    --holding;
  }
  const bool stall = stall_next.exchange(false) || ++groups_issued == stalled_group();
  auto launch = [stream, calls = std::move(calls), comm, stall] {
    fake_cuda::enqueue(stream, [calls, comm, stall] {
      if (stall) wait_for_abort(comm);
      if (!is_aborted(comm)) run_group(calls);  // an aborted communicator's kernels end without moving anything
    });
  };
  if (comm->blocking) {
    launch();
    return ncclSuccess;
  }
  start_progress(comm, std::move(launch));
  return ncclInProgress;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  --open_groups;
  std::vector<Call> calls;
  calls.swap(group);
  std::size_t bytes = 0;
  for (const Call& c : calls) {
    if (!c.comm->blocking) return ncclInvalidUsage;  // NCCL would run the group for real
    bytes += c.count * type_size(c.type);
  }
  info->estimatedTime = float(7.0 + 1e-3 * double(bytes));  // microseconds, a model tests can compute
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (send_hold_s > 0) {
    ++holding_send;
    std::this_thread::sleep_for(std::chrono::duration<double>(send_hold_s.load()));
    --holding_send;
  }
  return add({Call::send, data, nullptr, count, type, peer, comm, stream});
}

ncclResult_t ncclRecv(void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  return add({Call::recv, nullptr, data, count, type, peer, comm, stream});
}

ncclResult_t ncclAllReduce(const void* input, void* output, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return add({Call::all_reduce, input, output, count, type, -1, comm, stream});
}

ncclResult_t ncclReduceScatter(const void* input, void* output, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return add({Call::reduce_scatter, input, output, count, type, -1, comm, stream});
}

ncclResult_t ncclAllGather(const void* input, void* output, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  return add({Call::all_gather, input, output, count, type, -1, comm, stream});
}

}  // extern "C"
