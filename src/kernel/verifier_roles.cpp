// kiln/kernel verifier_roles.h: the threads that reach a named barrier, by trying every thread of the block.
#include "verifier_roles.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::kernel::detail {

namespace {

// Which threads of the block satisfy every condition (`reached`), or why that cannot be told from threadIdx alone.
std::string threadsReaching(const std::vector<std::pair<Idx, Idx>>& conditions, int64_t threads, std::vector<uint8_t>& reached) {
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
  reached.assign(static_cast<size_t>(threads), 0);
  for (int64_t t = 0; t < threads; ++t) {
    env[kThreadIdx] = t;
    reached[static_cast<size_t>(t)] = std::all_of(conditions.begin(), conditions.end(),
                                                  [&](const auto& c) { return evaluate(c.first, env) < evaluate(c.second, env); });
  }
  return "";
}

// "" when every aligned group of `granule` threads is reached whole or not at all (a trailing partial group: not at all).
std::string wholeGroups(const std::vector<uint8_t>& reached, int64_t granule, const char* group, bool trailing = false) {
  const auto threads = static_cast<int64_t>(reached.size());
  for (int64_t g = 0; g * granule < threads; ++g) {
    const int64_t end = std::min(threads, (g + 1) * granule);
    const auto n = std::count(reached.begin() + g * granule, reached.begin() + end, uint8_t{1});
    if (trailing && end - g * granule < granule && (n == 0 || n == end - g * granule)) continue;
    if (n != 0 && n != granule)
      return fmt::format("{} of the {} {} of {} {} reach it (a {} role is whole {}s)", n, granule,
                         granule == Target::kWarpSize ? "lanes" : "threads", group, g, group, group);
  }
  return "";
}

}  // namespace

std::string checkWarpGroup(const std::vector<std::pair<Idx, Idx>>& conditions, int64_t threads, int64_t expected) {
  std::vector<uint8_t> reached;
  if (std::string why = threadsReaching(conditions, threads, reached); !why.empty()) return why;
  if (std::string why = wholeGroups(reached, Target::kWarpSize, "warp"); !why.empty()) return why;
  const auto n = std::count(reached.begin(), reached.end(), uint8_t{1});
  if (n != expected) return fmt::format("{} threads reach it, not the {} it names", n, expected);
  return "";
}

std::string checkWholeGroups(const std::vector<std::pair<Idx, Idx>>& conditions, int64_t threads, int64_t granule, bool trailing) {
  std::vector<uint8_t> reached;
  if (std::string why = threadsReaching(conditions, threads, reached); !why.empty()) return why;
  return wholeGroups(reached, granule, granule == Target::kWarpSize ? "warp" : "warpgroup", trailing);
}

std::string checkWarpUniform(const Idx& e, int64_t threads) {
  std::string other;
  forEachVar(e, [&](int v) {
    if (v != kThreadIdx && other.empty()) other = fmt::format("variable #{}", v);
  });
  if (!other.empty()) return fmt::format("it reads more than threadIdx.x ({})", other);
  std::vector<int64_t> env(kThreadIdx + 1, 0);
  for (int64_t t = 0; t < threads; ++t) {
    env[kThreadIdx] = t;
    const int64_t v = evaluate(e, env);
    env[kThreadIdx] = t - t % Target::kWarpSize;
    if (v != evaluate(e, env)) return fmt::format("thread {} sees {}, not its warp's lane 0's {}", t, v, evaluate(e, env));
  }
  return "";
}

}  // namespace kiln::kernel::detail
