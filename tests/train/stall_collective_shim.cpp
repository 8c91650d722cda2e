// A test-only PMPI shim, loaded into one rank of dptrain with LD_PRELOAD: that rank's STALL_AT-th collective call
// (counting MPI_Allreduce, MPI_Allgather, MPI_Bcast and MPI_Barrier, in the order this process makes them) sleeps
// STALL_SECONDS before it starts, as a rank stopped or slowed during set-up would. The other ranks wait in the same
// collective (tests/train/setup_stall_test.cpp).
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>

namespace {

int calls = 0;

void maybe_stall() {
  const char* at = std::getenv("STALL_AT");
  const char* seconds = std::getenv("STALL_SECONDS");
  if (at != nullptr && seconds != nullptr && ++calls == std::atoi(at)) sleep(unsigned(std::atoi(seconds)));
}

}  // namespace

int MPI_Allreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  maybe_stall();
  return PMPI_Allreduce(send, receive, count, type, op, comm);
}

int MPI_Allgather(const void* send, int send_count, MPI_Datatype send_type, void* receive, int receive_count,
                  MPI_Datatype receive_type, MPI_Comm comm) {
  maybe_stall();
  return PMPI_Allgather(send, send_count, send_type, receive, receive_count, receive_type, comm);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  maybe_stall();
  return PMPI_Bcast(buffer, count, type, root, comm);
}

int MPI_Barrier(MPI_Comm comm) {
  maybe_stall();
  return PMPI_Barrier(comm);
}
