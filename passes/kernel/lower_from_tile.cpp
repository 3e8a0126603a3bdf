// kernel-lower-from-tile: carries each kernel's typed schedule out (kernel_builder.h and one file per strategy:
// lower_pointwise.cpp, lower_row_reduction.cpp, lower_contraction.cpp). A kernel identical to one already lowered
// (tile::reuseKey: the same computation and schedule on other buffers, e.g. another decoder layer's) gets a copy
// of that kernel's Kernel IR with its own buffers bound to the parameters.
#include <algorithm>
#include <map>

#include "kernel_builder.h"
#include "kiln/tile/reuse_key.h"

namespace kiln::kernel {

Program lowerFromTile(const tile::Program& tp, const LowerOptions& options, LowerStats* stats) {
  Program p;
  p.modelName = tp.loop.modelName;
  p.target = tp.target;
  p.buffers = tp.loop.buffers;
  p.inputs = tp.loop.inputs;
  p.outputs = tp.loop.outputs;
  struct Lowered {
    size_t kernel;             // index into p.kernels
    std::vector<int> buffers;  // its buffers in canonical order
  };
  std::map<std::string, Lowered> lowered;
  LowerStats counts;
  for (size_t i = 0; i < tp.loop.kernels.size(); ++i) {
    const loop::Kernel& lk = tp.loop.kernels[i];
    std::vector<int> buffers;
    std::string key = options.reuseIdenticalKernels ? tile::reuseKey(tp, i, buffers) : "";
    auto it = key.empty() ? lowered.end() : lowered.find(key);
    if (it == lowered.end()) {
      p.kernels.push_back(detail::KernelBuilder(tp, lk, tp.schedules[i]).build());
      if (!key.empty()) lowered.emplace(std::move(key), Lowered{p.kernels.size() - 1, std::move(buffers)});
      ++counts.lowered;
      continue;
    }
    Kernel k = p.kernels[it->second.kernel];
    k.name = lk.name;
    k.origins = lk.origins;
    const std::vector<int>& first = it->second.buffers;
    for (Param& param : k.params) {
      auto pos = std::find(first.begin(), first.end(), param.buffer) - first.begin();
      param.buffer = buffers.at(static_cast<size_t>(pos));
      param.name = p.buffers[param.buffer].name;
    }
    p.kernels.push_back(std::move(k));
    ++counts.reused;
  }
  if (stats) *stats = counts;
  return p;
}

}  // namespace kiln::kernel
