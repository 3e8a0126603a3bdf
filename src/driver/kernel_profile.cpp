// Formats per-kernel GPU times for `kiln run --profile` (kiln/driver/kernel_profile.h).
#include "kiln/driver/kernel_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "kiln/support/error.h"

namespace kiln {

std::string formatKernelProfile(const runtime::Manifest& m, const std::vector<double>& msPerLaunch, int launches, int top) {
  KILN_ASSERT(msPerLaunch.size() == m.kernels.size(), "{} kernel times for {} kernels", msPerLaunch.size(), m.kernels.size());
  struct Group {
    size_t first = 0;  // the first kernel with this code, in launch order
    int launches = 0;
    double ms = 0;     // per forward
  };
  std::map<std::pair<std::string, std::string>, Group> byCode;
  std::vector<std::pair<std::string, std::string>> order;
  double total = 0;
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    auto key = std::make_pair(m.kernels[i].cubin, m.kernels[i].entry);
    auto [it, fresh] = byCode.emplace(key, Group{i, 0, 0});
    if (fresh) order.push_back(key);
    it->second.launches += 1;
    it->second.ms += msPerLaunch[i];
    total += msPerLaunch[i];
  }
  std::vector<Group> groups;
  for (auto& key : order) groups.push_back(byCode[key]);
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.ms > b.ms; });

  std::string out = fmt::format(
      "kiln: kernel profile (each kernel alone, {} launches back to back, hot L2), by total time per forward\n", launches);
  out += fmt::format("  {:>3}  {:<22} {:>8} {:>10} {:>11} {:>6}  {:<18} {}\n", "#", "kernel", "launches", "us/launch",
                     "us/forward", "share", "grid x block", "source");
  double listed = 0;
  size_t shown = std::min(groups.size(), static_cast<size_t>(std::max(top, 0)));
  for (size_t g = 0; g < shown; ++g) {
    const Group& gr = groups[g];
    const runtime::KernelInfo& k = m.kernels[gr.first];
    listed += gr.ms;
    out += fmt::format("  {:>3}  {:<22} {:>8} {:>10.2f} {:>11.1f} {:>5.1f}%  {:<18} {}\n", g + 1, k.name, gr.launches,
                       gr.ms / gr.launches * 1e3, gr.ms * 1e3, total > 0 ? 100 * gr.ms / total : 0.0,
                       fmt::format("{} x {}", k.grid[0] * k.grid[1] * k.grid[2], k.block[0] * k.block[1] * k.block[2]),
                       k.source);
  }
  if (shown < groups.size())
    out += fmt::format("       ... {} more kernels: {:.1f} us per forward ({:.1f}%)\n", groups.size() - shown,
                       (total - listed) * 1e3, total > 0 ? 100 * (total - listed) / total : 0.0);
  out += fmt::format("  sum of the kernels: {:.3f} ms per forward (the forward itself, kernels back to back: see the --bench line)\n", total);
  return out;
}

}  // namespace kiln
