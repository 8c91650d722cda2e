// NCCL and the CUDA runtime on the CPU, for testing the NCCL transport's host code, dpbench --device cuda and
// dptrain --device cuda (cuda_backend_on_fake_runtime.cpp) where there is no GPU. The test executables define the
// NCCL and CUDA runtime functions that src/comm/nccl/, the cuda device and dpbench call (fake_nccl.cpp,
// fake_cuda_runtime.cpp) and the transport's reduce-add launch; the linker takes these before the real libraries, so
// NcclTransport and dpbench run unchanged over them:
//   - one device, whose memory is the host's; a stream is a thread that runs its queue in order after random pauses;
//   - a group's sends and receives (matched by peer and order, as NCCL's) and NCCL's collectives run on the stream
//     as MPI calls on a duplicate of MPI_COMM_WORLD; the BF16 sums of the collectives add in fp32 and round once;
//   - a non-blocking communicator answers ncclInProgress to its set-up, each ncclGroupEnd and its finalize, then
//     "in progress" to the next polls of ncclCommGetAsyncError, and queues a group's work on its stream only at
//     the last of them, as NCCL's launch thread would (work the caller queued on the stream before the group
//     settled runs first); a call on it while in progress, which NCCL forbids, is counted;
//   - faults on demand: a group that stalls until the communicator is aborted (also the N-th group of the process
//     with FAKE_NCCL_STALL_GROUP=N), an asynchronous error, a blocking ncclGroupEnd that holds the calling
//     thread (a connection waiting on a peer), sends that hold their caller inside the group, and an abort that
//     holds its caller (waiting for the peers' aborts).
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>

namespace fake_cuda {

// Queues `item` on the stream, behind everything queued there before.
void enqueue(cudaStream_t stream, std::function<void()> item);
// Waits until the stream, or every stream, has run everything queued on it (after an aborted operation, before its
// buffers go).
void drain(cudaStream_t stream);
void drain_all();

}  // namespace fake_cuda

namespace fake_nccl {

int world_rank();

// How many polls of ncclCommGetAsyncError a non-blocking call stays in progress (default 2).
void set_polls_in_progress(int polls);
// The next group issued (on any communicator of this process) waits on its stream until its communicator is
// aborted, and then moves nothing.
void stall_next_group();
// ncclCommGetAsyncError reports `error` from now on (ncclSuccess: none).
void set_async_error(ncclResult_t error);
// Each ncclGroupEnd on a blocking communicator holds the calling thread this long before queuing its work.
void set_blocking_group_end_seconds(double seconds);
bool in_held_group_end();  // a thread of this process is inside such an ncclGroupEnd now
// Each ncclSend holds the calling thread this long (inside its group) before it is queued.
void set_send_seconds(double seconds);
bool in_held_send();  // a thread of this process is inside such an ncclSend now
// Each ncclCommAbort holds the calling thread this long after aborting (NCCL's waits for the peers' own aborts).
void set_abort_seconds(double seconds);
int aborts_while_a_group_was_open();  // ncclCommAbort calls made while a thread of this process had a group open

int aborts();                   // ncclCommAbort calls so far
int calls_while_in_progress();  // calls on a non-blocking communicator still in progress (NCCL forbids them)

}  // namespace fake_nccl
