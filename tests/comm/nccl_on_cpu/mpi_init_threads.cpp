// dpbench_on_fake_nccl's MPI_Init, through MPI's profiling interface: the fake NCCL moves data with MPI calls from
// its stream threads while the main thread makes its own, which needs MPI_THREAD_MULTIPLE; dpbench itself asks for
// no thread support (the real NCCL needs none).
#include <mpi.h>

#include <cstdio>

extern "C" int MPI_Init(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  const int result = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (result == MPI_SUCCESS && provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "dpbench_on_fake_nccl: this MPI gives no MPI_THREAD_MULTIPLE\n");
    PMPI_Abort(MPI_COMM_WORLD, 1);
  }
  return result;
}
