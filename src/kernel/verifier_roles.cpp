// kiln/kernel verifier_roles.h: the threads that reach a named barrier, by trying every thread of the block.
#include "verifier_roles.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::kernel::detail {

std::string checkWarpGroup(const std::vector<std::pair<Idx, Idx>>& conditions, int64_t threads, int64_t expected) {
  int maxVar = kThreadIdx;
  for (const auto& [a, b] : conditions)
    for (const Idx& e : {a, b}) {
      std::string other;
      forEachVar(e, [&](int v) {
        if (v != kThreadIdx && other.empty()) other = toString(e);
        maxVar = std::max(maxVar, v);
      });
      if (!other.empty())
        return fmt::format("its condition `{} < {}` reads more than threadIdx.x (in `{}`): a warp role must be a fixed set of "
                           "threads", toString(a), toString(b), other);
    }
  std::vector<int64_t> env(static_cast<size_t>(maxVar) + 1, 0);
  int64_t reached = 0;
  for (int64_t w = 0; w * Target::kWarpSize < threads; ++w) {
    int64_t lanes = 0;
    for (int64_t t = w * Target::kWarpSize; t < std::min(threads, (w + 1) * Target::kWarpSize); ++t) {
      env[kThreadIdx] = t;
      lanes += std::all_of(conditions.begin(), conditions.end(),
                           [&](const auto& c) { return evaluate(c.first, env) < evaluate(c.second, env); });
    }
    if (lanes != 0 && lanes != Target::kWarpSize)
      return fmt::format("{} of the 32 lanes of warp {} reach it (a warp role is whole warps)", lanes, w);
    reached += lanes;
  }
  if (reached != expected) return fmt::format("{} threads reach it, not the {} it names", reached, expected);
  return "";
}

}  // namespace kiln::kernel::detail
