// `native` collectives: the MPI library's own MPI_Allreduce, MPI_Reduce_scatter and MPI_Allgatherv on the
// transport's communicator, with the same in-place chunk semantics as collectives.hpp. MPI has no BF16 type:
// BF16 travels as a 2-byte datatype reduced by a user-defined commutative MPI_Op that adds in fp32 and rounds
// to BF16 (the same arithmetic as host_reduce_add); fp32 uses MPI_FLOAT with MPI_SUM.
#pragma once
#include <memory>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/mpi_transport.hpp"

namespace dptrain {

void native_all_reduce(const MpiTransport& transport, void* data, std::size_t count, DType dtype);
void native_reduce_scatter(const MpiTransport& transport, void* data, std::size_t count, DType dtype);
void native_all_gather(const MpiTransport& transport, void* data, std::size_t count, DType dtype);

// Records ring_bytes_sent() as its wire bytes: what MPI itself sends is invisible to us.
std::unique_ptr<Collectives> make_native_collectives(MpiTransport& transport);

}  // namespace dptrain
