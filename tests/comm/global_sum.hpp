// For MPI tests: a per-rank count summed over all ranks (a collective call: every rank must make it), so rank 0,
// the only one printing, reports every rank's errors.
#pragma once
#include <mpi.h>

namespace dptrain {

inline long global_sum(long value) {
  long total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

}  // namespace dptrain
