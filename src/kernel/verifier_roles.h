// Warp roles for the Kernel IR verifier (private to src/kernel): which threads of a block reach a statement nested in
// thread-dependent conditions, so a named barrier can be checked against the group it names.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kernel/ir.h"

namespace kiln::kernel::detail {

// Conditions `a < b` (their index variables expanded to threadIdx, blockIdx and loop variables) enclosing a named
// barrier of `expected` threads in a block of `threads`: "" when exactly `expected` threads, in whole warps, satisfy all
// of them; otherwise why not (a condition reading anything but threadIdx, a warp split, another count).
std::string checkWarpGroup(const std::vector<std::pair<Idx, Idx>>& conditions, int64_t threads, int64_t expected);

}  // namespace kiln::kernel::detail
