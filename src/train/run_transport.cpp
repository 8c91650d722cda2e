// The run's transport: MPI for the cpu backend, NCCL (where built) for the cuda backend.
#include "dptrain/train/run_transport.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <stdexcept>

#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/core/error.hpp"
#if DPTRAIN_HAVE_NCCL
#include "dptrain/comm/nccl_transport.hpp"
#endif

namespace dptrain {

std::string multi_rank_unsupported(const std::string& backend_name) {
  if (backend_name != "cuda") return "";
#if DPTRAIN_HAVE_NCCL
  return "";
#else
  return "several ranks on GPUs need NCCL, which this build was made without (CMake found no nccl.h/libnccl)";
#endif
}

std::string transport_environment_problem(bool nccl) {
  if (nccl) {
    const char* blocking = std::getenv("NCCL_COMM_BLOCKING");
    if (blocking == nullptr || *blocking == '\0') return "";  // NCCL takes an empty value as unset
    return fmt::format(
        "NCCL_COMM_BLOCKING is set ('{}'): it would override the mode dptrain gives each NCCL communicator "
        "(non-blocking, watched against --comm-timeout; blocking with --nccl-blocking); unset it",
        blocking);
  }
  try {
    MpiTransport::check_environment();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

RunTransport connect_run_transport(Backend& backend, Algorithm algorithm, Stream comm_stream, int gpu,
                                   double timeout_s, bool nccl_blocking) {
  RunTransport run;
#if DPTRAIN_HAVE_NCCL
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (backend.name() == "cuda" && ranks > 1) {  // one GPU alone has nothing to move: no NCCL set-up
    auto nccl = std::make_unique<NcclTransport>(MPI_COMM_WORLD, gpu, static_cast<CUstream_st*>(comm_stream.handle),
                                                NcclSettings{.timeout_s = timeout_s, .blocking = nccl_blocking});
    ReduceAdd reduce_add = nccl->reduce_add();
    run.name = nccl->name();
    run.transport = std::move(nccl);
    run.collectives =
        make_collectives(algorithm, *run.transport, std::move(reduce_add), backend.device(), kNcclRingPieceBytes);
    return run;
  }
#endif
  (void)comm_stream, (void)gpu, (void)timeout_s, (void)nccl_blocking;
  // MPI moves host memory only (its sends, receives and reductions read the buffers on the host): a device whose
  // memory the host cannot touch never gets here with more than one rank (multi_rank_unsupported refuses it).
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world > 1 && !backend.device().host_accessible())
    throw std::logic_error("connect_run_transport: MPI collectives on device memory the host cannot reach");
  run.name = "MPI";
  run.transport = std::make_unique<MpiTransport>();
  run.collectives = make_collectives(
      algorithm, *run.transport,
      [&backend](void* acc, const void* in, std::size_t n, DType dtype) { backend.reduce_add(acc, in, n, dtype); },
      backend.device());
  return run;
}

}  // namespace dptrain
