// The backends of this build, by name.
#include "dptrain/compute/backend.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {

std::vector<std::string> backend_names() { return {"cpu"}; }

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "cpu") return make_cpu_backend();
  fail("unknown compute backend '{}' (this build has: cpu)", name);
}

}  // namespace dptrain
