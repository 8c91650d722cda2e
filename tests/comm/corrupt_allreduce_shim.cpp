// A test-only PMPI shim, loaded into dpbench with LD_PRELOAD: every MPI_Allreduce that sums MPI_FLOAT adds 1 to
// element 1 of its result on every rank, so that dpbench's check (-c 1) has wrong elements to find and report
// (tests/comm/dpbench_test.sh). dpbench's own bookkeeping sums counts as MPI_LONG and times as MPI_DOUBLE, which
// pass untouched.
#include <mpi.h>

int MPI_Allreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const int status = PMPI_Allreduce(send, receive, count, type, op, comm);
  if (status == MPI_SUCCESS && type == MPI_FLOAT && op == MPI_SUM && count > 1)
    static_cast<float*>(receive)[1] += 1.0f;
  return status;
}
