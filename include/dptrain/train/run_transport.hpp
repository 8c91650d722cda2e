// The transport a training run's collectives use, chosen by its backend: MPI between CPU ranks (the backend's
// reduce-add, scratch in host memory) or NCCL between GPU ranks (its reduce kernel on its own stream, scratch in
// the GPU's memory, every operation issued on the engine's comm stream).
#pragma once
#include <memory>
#include <string>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/transport.hpp"
#include "dptrain/compute/backend.hpp"

namespace dptrain {

// The ring's message pieces between GPUs: large enough that a group's launch is small beside its transfer (NCCL
// moves p2p data in chunks of up to 512 KiB), small enough that a piece's addition overlaps the next one's.
inline constexpr std::size_t kNcclRingPieceBytes = std::size_t{4} << 20;

struct RunTransport {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Collectives> collectives;
  std::string name;  // "MPI" or "NCCL 2.28.9, non-blocking"
};

// Whether this build can connect `backend_name` ranks of a multi-rank job ("" when it can, else why not).
std::string multi_rank_unsupported(const std::string& backend_name);

// What in this rank's own environment the run's transport (NCCL where `nccl`, else MPI) would not work with, in
// one line, or "": the MPI transport's DPTRAIN_MPI_WAIT and DPTRAIN_MPI_SPIN_US (MpiTransport::check_environment),
// or for NCCL a set NCCL_COMM_BLOCKING, which overrides the mode given to each communicator (non-blocking, so that
// the deadline can end any call; blocking with --nccl-blocking; blocking for NCCL's estimates, which run for real
// on a non-blocking one). Each rank reads its own environment: the caller makes the ranks agree.
std::string transport_environment_problem(bool nccl);

// Collective: every rank calls it with the same algorithm. `comm_stream` is the engine's, `gpu` the rank's GPU
// (cuda backend), timeout_s the --comm-timeout a device transport watches its operations with, nccl_blocking
// --nccl-blocking (NcclSettings::blocking).
RunTransport connect_run_transport(Backend& backend, Algorithm algorithm, Stream comm_stream, int gpu,
                                   double timeout_s, bool nccl_blocking);

}  // namespace dptrain
