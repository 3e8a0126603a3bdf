// Warp roles for the Kernel IR verifier (private to src/kernel): which threads of a block reach a statement nested in
// thread-dependent conditions, so a named barrier can be checked against the group it names and a collective statement
// (mma, wgmma) against the whole warps or warpgroups it needs.
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
// The same conditions enclosing a collective statement of groups of `granule` threads (32: mma, shuffles; 128: wgmma):
// "" when the threads that satisfy all of them are whole groups, aligned (threads [g, g + granule) for g a multiple of
// granule) and inside the block (a trailing group of fewer threads reaches none of it); otherwise why not. trailing: the
// block's last group, when it has fewer threads, may be reached whole too (wgmma.wait_group in a producer warp).
std::string checkWholeGroups(const std::vector<std::pair<Idx, Idx>>& conditions, int64_t threads, int64_t granule,
                             bool trailing = false);
// "" when e (expanded) reads threadIdx alone and takes one value in all lanes of each warp of a block of `threads`.
std::string checkWarpUniform(const Idx& e, int64_t threads);

}  // namespace kiln::kernel::detail
