#include "kiln/cuda/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "kiln/runtime/manifest.h"

namespace kiln::cuda {
namespace {

int64_t bytesOf(const loop::Buffer& b) { return numel(b.shape) * dtypeBytes(b.dtype); }

std::vector<std::pair<int, int>> lifetimesOf(const kernel::Program& p) {
  std::vector<std::pair<int, int>> life(p.buffers.size(), {-1, -1});
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (const kernel::Param& prm : p.kernels[k].params) {
      auto& [first, last] = life[static_cast<size_t>(prm.buffer)];
      if (first < 0) first = static_cast<int>(k);
      last = static_cast<int>(k);
    }
  return life;
}

bool overlap(std::pair<int, int> a, std::pair<int, int> b) { return a.first <= b.second && b.first <= a.second; }

// Offsets within the temporaries' region: largest first, each at the lowest offset where it overlaps no placed
// temporary alive at the same time. Returns the region's size.
int64_t placeTemporaries(const kernel::Program& p, const std::vector<std::pair<int, int>>& life, std::vector<int64_t>& at) {
  std::vector<size_t> temps;
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].kind == loop::Buffer::Kind::Temp) temps.push_back(b);
  std::stable_sort(temps.begin(), temps.end(), [&](size_t a, size_t b) { return bytesOf(p.buffers[a]) > bytesOf(p.buffers[b]); });
  std::vector<size_t> placed;
  int64_t region = 0;
  for (size_t t : temps) {
    const int64_t bytes = runtime::arenaAligned(bytesOf(p.buffers[t]));
    std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of the placed temporaries alive with t
    for (size_t o : placed)
      if (life[t].first >= 0 && life[o].first >= 0 && overlap(life[t], life[o]))
        busy.emplace_back(at[o], at[o] + runtime::arenaAligned(bytesOf(p.buffers[o])));
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (auto [begin, end] : busy) {
      if (offset + bytes <= begin) break;
      offset = std::max(offset, end);
    }
    at[t] = offset;
    region = std::max(region, offset + bytes);
    placed.push_back(t);
  }
  return region;
}

}  // namespace

MemoryPlan planMemory(const kernel::Program& p) {
  MemoryPlan m;
  const size_t n = p.buffers.size();
  m.offsets.assign(n, 0);
  m.inPlaceOf.assign(n, -1);
  m.lifetimes = lifetimesOf(p);
  for (auto [output, input] : p.inPlace)
    if (input < output) m.inPlaceOf[static_cast<size_t>(output)] = input;  // the input is placed first
  int64_t offset = 0;
  for (size_t b = 0; b < n; ++b) {
    if (p.buffers[b].kind == loop::Buffer::Kind::Temp) continue;
    if (m.inPlaceOf[b] >= 0) {  // a state's new value, on the bytes of its current one
      m.offsets[b] = m.offsets[static_cast<size_t>(m.inPlaceOf[b])];
      continue;
    }
    m.offsets[b] = offset;
    offset = runtime::arenaAligned(offset + bytesOf(p.buffers[b]));
  }
  m.fixedBytes = offset;
  std::vector<int64_t> at(n, 0);
  m.temporaryBytes = placeTemporaries(p, m.lifetimes, at);
  for (size_t b = 0; b < n; ++b)
    if (p.buffers[b].kind == loop::Buffer::Kind::Temp) {
      m.offsets[b] = m.fixedBytes + at[b];
      m.unsharedTemporaryBytes += runtime::arenaAligned(bytesOf(p.buffers[b]));
    }
  m.arenaBytes = std::max<int64_t>(m.fixedBytes + m.temporaryBytes, runtime::kArenaAlignment);
  return m;
}

std::string explainMemory(const kernel::Program& p) {
  const MemoryPlan m = planMemory(p);
  int64_t weights = 0, weightSlices = 0, io = 0, counters = 0;  // (an output written in place of an input takes no bytes of its own)
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const loop::Buffer& b = p.buffers[i];
    if (b.kind == loop::Buffer::Kind::Weight) weights += bytesOf(b), weightSlices += runtime::arenaAligned(bytesOf(b));
    if (b.kind == loop::Buffer::Kind::Input || (b.kind == loop::Buffer::Kind::Output && m.inPlaceOf[i] < 0)) io += bytesOf(b);
    if (b.kind == loop::Buffer::Kind::Counters) counters += bytesOf(b);
  }
  std::string out = fmt::format(
      "memory plan of {}: arena {} bytes = {} apart (weights {}, inputs and outputs {}, counters {}, each aligned to {}) "
      "+ {} of temporaries ({} if none shared their bytes)\n",
      p.modelName, m.arenaBytes, m.fixedBytes, weights, io, counters, runtime::kArenaAlignment, m.temporaryBytes,
      m.unsharedTemporaryBytes);
  out += fmt::format("  at run time: each session allocates {} bytes (the arena less the weights' slices); the weights are "
                     "uploaded once per loaded model, whatever its sessions\n", m.arenaBytes - weightSlices);
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (m.inPlaceOf[b] >= 0)
      out += fmt::format("  {} written in place of {}\n", p.buffers[b].name, p.buffers[static_cast<size_t>(m.inPlaceOf[b])].name);
  std::vector<size_t> temps;
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].kind == loop::Buffer::Kind::Temp) temps.push_back(b);
  std::stable_sort(temps.begin(), temps.end(), [&](size_t a, size_t b) { return bytesOf(p.buffers[a]) > bytesOf(p.buffers[b]); });
  for (size_t t : temps) {
    const auto [first, last] = m.lifetimes[t];
    const std::string life = first < 0 ? "bound by no kernel"
                                       : fmt::format("kernels {} .. {}", p.kernels[static_cast<size_t>(first)].name,
                                                     p.kernels[static_cast<size_t>(last)].name);
    out += fmt::format("  {:>12} bytes at +{:<12} {} ({})\n", bytesOf(p.buffers[t]), m.offsets[t] - m.fixedBytes,
                       p.buffers[t].name, life);
  }
  return out;
}

}  // namespace kiln::cuda
