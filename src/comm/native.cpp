// `native` collectives: MPI's own MPI_Allreduce / MPI_Reduce_scatter / MPI_Allgatherv, in place, with the chunk
// layout of collectives.hpp, and a BF16 sum for MPI (a 2-byte datatype plus a user-defined MPI_Op).
#include "dptrain/comm/native.hpp"

#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

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

// MPI_Reduce_scatter and MPI_Allgatherv take int counts and displacements.
void require_int_counts(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw std::length_error(std::string(what) + ": native supports at most INT_MAX elements per call, got " +
                            std::to_string(count));
  }
}

struct ChunkCounts {
  std::vector<int> counts, displacements;
};

ChunkCounts chunk_counts(std::size_t count, int size) {
  ChunkCounts result;
  for (int q = 0; q < size; ++q) {
    result.counts.push_back(static_cast<int>(chunk_size(count, size, q)));
    result.displacements.push_back(static_cast<int>(chunk_begin(count, size, q)));
  }
  return result;
}

}  // namespace

void native_all_reduce(const MpiTransport& transport, void* data, std::size_t count, DType dtype) {
  const auto [type, sum] = mpi_type_and_sum(dtype);
  auto* base = static_cast<std::byte*>(data);
  // Element-wise, so a call over INT_MAX elements is just several calls.
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min<std::size_t>(count - done, INT_MAX);
    check(MPI_Allreduce(MPI_IN_PLACE, base + done * element_size(dtype), static_cast<int>(n), type, sum,
                        transport.communicator()),
          "MPI_Allreduce");
    done += n;
  }
}

void native_reduce_scatter(const MpiTransport& transport, void* data, std::size_t count, DType dtype) {
  if (count == 0) return;
  require_int_counts(count, "reduce_scatter");
  const auto [type, sum] = mpi_type_and_sum(dtype);
  const ChunkCounts chunks = chunk_counts(count, transport.size());
  check(MPI_Reduce_scatter(MPI_IN_PLACE, data, chunks.counts.data(), type, sum, transport.communicator()),
        "MPI_Reduce_scatter");
  // In place, MPI leaves rank r's result at the start of the buffer; move it to where chunk r lives.
  const int r = transport.rank();
  auto* base = static_cast<std::byte*>(data);
  const std::size_t element = element_size(dtype);
  std::memmove(base + chunk_begin(count, transport.size(), r) * element, base,
               chunk_size(count, transport.size(), r) * element);
}

void native_all_gather(const MpiTransport& transport, void* data, std::size_t count, DType dtype) {
  if (count == 0) return;
  require_int_counts(count, "all_gather");
  const auto [type, sum] = mpi_type_and_sum(dtype);
  const ChunkCounts chunks = chunk_counts(count, transport.size());
  check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, chunks.counts.data(), chunks.displacements.data(),
                       type, transport.communicator()),
        "MPI_Allgatherv");
}

namespace {

class NativeCollectives final : public Collectives {
 public:
  explicit NativeCollectives(MpiTransport& transport) : Collectives(Algorithm::native, transport), mpi_(transport) {}

 protected:
  void execute(CollectiveOp op, void* data, std::size_t count, DType dtype) override {
    switch (op) {
      case CollectiveOp::all_reduce: native_all_reduce(mpi_, data, count, dtype); break;
      case CollectiveOp::reduce_scatter: native_reduce_scatter(mpi_, data, count, dtype); break;
      case CollectiveOp::all_gather: native_all_gather(mpi_, data, count, dtype); break;
    }
  }

  // MPI's own traffic is invisible: record what the ring would send for the same call.
  std::uint64_t wire_bytes(CollectiveOp op, std::size_t count, DType dtype, std::uint64_t) const override {
    return ring_bytes_sent(op, count, dtype, rank(), size());
  }

 private:
  const MpiTransport& mpi_;
};

}  // namespace

std::unique_ptr<Collectives> make_native_collectives(MpiTransport& transport) {
  return std::make_unique<NativeCollectives>(transport);
}

}  // namespace dptrain
