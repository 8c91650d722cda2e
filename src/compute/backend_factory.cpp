// The backends of this build, by name, and whether one can run on this node.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "dptrain/compute/backend.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {

std::vector<std::string> backend_names() {
#ifdef DPTRAIN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Placement placement_from_environment(int local_rank, int local_size) {
  Placement placement{.local_rank = local_rank, .local_size = local_size};
  if (const char* value = std::getenv("DPTRAIN_RANKS_PER_GPU"); value != nullptr) {
    char* end = nullptr;
    const long ranks = std::strtol(value, &end, 10);
    require(end != value && *end == '\0' && ranks >= 1 && ranks <= 1024,
            "DPTRAIN_RANKS_PER_GPU: expected a whole number of at least 1, got '{}'", value);
    placement.ranks_per_gpu = int(ranks);
  }
  return placement;
}

std::string backend_unavailable(std::string_view name, Placement placement) {
  if (name == "cpu") return "";
  if (name != "cuda") return fmt::format("--device: unknown device '{}' (expected auto, cpu or cuda)", name);
#ifdef DPTRAIN_HAVE_CUDA
  std::string reason;
  const int gpus = visible_gpu_count(&reason);
  if (gpus == 0) return fmt::format("--device cuda: no usable GPU: {}", reason);
  if (placement.local_size > gpus * placement.ranks_per_gpu)
    return fmt::format(
        "--device cuda: {} ranks on this node but {} GPU(s) visible ({} rank(s) per GPU; start at "
        "most {} ranks per node, or give each rank its own GPUs with a CUDA_VISIBLE_DEVICES per rank)",
        placement.local_size, gpus, placement.ranks_per_gpu, gpus * placement.ranks_per_gpu);
  return "";
#else
  return "--device cuda: this build has no CUDA backend (nvcc was not found, or -DDPTRAIN_CUDA=OFF); use --device "
         "cpu";
#endif
}

std::string auto_backend_name() {
#ifdef DPTRAIN_HAVE_CUDA
  if (visible_gpu_count() > 0) return "cuda";
#endif
  return "cpu";
}

std::string unknown_attention_mode(std::string_view mode) {
  if (std::find(std::begin(kAttentionModes), std::end(kAttentionModes), mode) != std::end(kAttentionModes)) return "";
  return fmt::format("--attention: unknown mode '{}' (expected auto, gemm or fused)", mode);
}

std::string attention_unavailable(std::string_view name, std::string_view mode) {
  if (std::string unknown = unknown_attention_mode(mode); !unknown.empty()) return unknown;
  if (mode != "fused") return "";
  if (name == "cpu") return "--attention fused: the cpu backend has no fused attention (use gemm or auto)";
#ifndef DPTRAIN_HAVE_CUDNN
  return "--attention fused: this build has no cuDNN (cuDNN 9 and the headers of scripts/cudnn-frontend.sh were not "
         "found when it was configured); use gemm or auto";
#else
  return "";
#endif
}

std::unique_ptr<Backend> make_backend(std::string_view name, Placement placement,
                                      std::shared_ptr<const CpuGemm> cpu_gemm, std::string_view attention,
                                      [[maybe_unused]] bool fuse_epilogues) {
  if (const std::string why = backend_unavailable(name, placement); !why.empty()) throw UserError(why);
  if (const std::string why = attention_unavailable(name, attention); !why.empty()) throw UserError(why);
  if (name == "cpu") return cpu_gemm ? make_cpu_backend(std::move(cpu_gemm)) : make_cpu_backend();
#ifdef DPTRAIN_HAVE_CUDA
  return make_cuda_backend(placement.gpu(), attention, fuse_epilogues);
#else
  fail("unreachable: backend '{}'", name);
#endif
}

}  // namespace dptrain
