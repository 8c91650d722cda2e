// Names of the collective algorithms (--allreduce ring|tree|native) and of the three collective operations.
#pragma once
#include <string_view>

namespace dptrain {

enum class Algorithm { ring, tree, native };
enum class CollectiveOp { all_reduce, reduce_scatter, all_gather };

std::string_view algorithm_name(Algorithm algorithm);  // "ring", "tree", "native"

// Throws UserError "<flag>: unknown algorithm 'x' (expected ring, tree or native)".
Algorithm parse_algorithm(std::string_view name, std::string_view flag = "--allreduce");

std::string_view collective_op_name(CollectiveOp op);  // "all_reduce", "reduce_scatter", "all_gather"

}  // namespace dptrain
