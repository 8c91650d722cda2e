// MpiTransport::native: MPI's own MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather, in place, on the
// transport's communicator, with the chunk layout of collectives.hpp (reduce-scatter and all-gather need p to
// divide count, so every chunk is count / p). MPI has no BF16 type: BF16 travels as a 2-byte datatype reduced by
// a user-defined commutative MPI_Op that adds in fp32 and rounds to BF16 (host_reduce_add, the arithmetic of every
// other hop); fp32 uses MPI_FLOAT with MPI_SUM.
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dptrain/comm/mpi_transport.hpp"

namespace dptrain {
namespace {

// MPI calls this with inout = in + inout; BF16 gets the same fp32-add-then-round as every other hop.
void bf16_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  host_reduce_add(inout, in, static_cast<std::size_t>(*length), DType::bf16);
}

struct MpiTypeAndSum {
  MPI_Datatype type;
  MPI_Op sum;
};

// Created on first use (after MPI_Init) and kept until MPI_Finalize frees them.
MpiTypeAndSum mpi_type_and_sum(DType dtype) {
  if (dtype == DType::f32) return {MPI_FLOAT, MPI_SUM};
  static const MpiTypeAndSum bf16 = [] {
    MpiTypeAndSum handles{};
    MPI_Type_contiguous(2, MPI_BYTE, &handles.type);
    MPI_Type_commit(&handles.type);
    MPI_Op_create(&bf16_sum, /*commute=*/1, &handles.sum);
    return handles;
  }();
  return bf16;
}

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
}

// MPI_Reduce_scatter_block and MPI_Allgather take one int count per rank.
int chunk_count(std::size_t count, int size, const char* what) {
  const std::size_t chunk = count / static_cast<std::size_t>(size);
  if (chunk > static_cast<std::size_t>(INT_MAX)) {
    throw std::length_error(std::string(what) + ": native supports at most INT_MAX elements per rank, got " +
                            std::to_string(chunk));
  }
  return static_cast<int>(chunk);
}

void all_reduce(MPI_Comm comm, void* data, std::size_t count, DType dtype) {
  const auto [type, sum] = mpi_type_and_sum(dtype);
  auto* base = static_cast<std::byte*>(data);
  // Element-wise, so a call over INT_MAX elements is just several calls.
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min<std::size_t>(count - done, INT_MAX);
    check(MPI_Allreduce(MPI_IN_PLACE, base + done * element_size(dtype), static_cast<int>(n), type, sum, comm),
          "MPI_Allreduce");
    done += n;
  }
}

void reduce_scatter(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype) {
  const int chunk = chunk_count(count, size, "reduce_scatter");
  const auto [type, sum] = mpi_type_and_sum(dtype);
  check(MPI_Reduce_scatter_block(MPI_IN_PLACE, data, chunk, type, sum, comm), "MPI_Reduce_scatter_block");
  // In place, MPI leaves rank r's result at the start of the buffer; move it to where chunk r lives.
  auto* base = static_cast<std::byte*>(data);
  const std::size_t chunk_bytes = static_cast<std::size_t>(chunk) * element_size(dtype);
  std::memmove(base + static_cast<std::size_t>(rank) * chunk_bytes, base, chunk_bytes);
}

void all_gather(MPI_Comm comm, int size, void* data, std::size_t count, DType dtype) {
  const int chunk = chunk_count(count, size, "all_gather");
  check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, chunk, mpi_type_and_sum(dtype).type, comm),
        "MPI_Allgather");
}

}  // namespace

void MpiTransport::native(CollectiveOp op, void* data, std::size_t count, DType dtype) {
  require_native_chunks(op, count, size_);
  if (count == 0) return;
  switch (op) {
    case CollectiveOp::all_reduce: all_reduce(comm_, data, count, dtype); break;
    case CollectiveOp::reduce_scatter: reduce_scatter(comm_, rank_, size_, data, count, dtype); break;
    case CollectiveOp::all_gather: all_gather(comm_, size_, data, count, dtype); break;
  }
}

}  // namespace dptrain
