// Algorithm and operation names.
#include "dptrain/comm/algorithm.hpp"

#include "dptrain/core/error.hpp"

namespace dptrain {

std::string_view algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
    case Algorithm::native: return "native";
  }
  return "?";
}

Algorithm parse_algorithm(std::string_view name, std::string_view flag) {
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::native}) {
    if (name == algorithm_name(a)) return a;
  }
  fail("{}: unknown algorithm '{}' (expected ring, tree or native)", flag, name);
}

std::string_view collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::all_gather: return "all_gather";
  }
  return "?";
}

}  // namespace dptrain
