// `kiln compile --explain-fusion`: what each kernel holds and why the kernels whose buffers others read
// were not fused into their readers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/loop/ir.h"
#include "kiln/support/layers.h"

namespace kiln::loop {
namespace {

// Each kernel's decoder layer (kiln/support/layers.h), from the weights it reads.
std::vector<int> kernelLayers(const Program& p) {
  std::vector<std::vector<std::string>> weights;
  for (const Kernel& k : p.kernels) {
    weights.emplace_back();
    forEachKernelRead(k, [&](int b, bool) {
      if (p.buffers[b].kind == Buffer::Kind::Weight) weights.back().push_back(p.buffers[b].name);
    });
  }
  return layersOfKernels(weights);
}

std::string layerName(int layer) {
  return layer == kBeforeLayers ? "before the layers" : layer == kAfterLayers ? "after the layers" : fmt::format("layer {}", layer);
}

}  // namespace

std::string explainFusion(const Program& p) {
  std::string out = fmt::format("// kiln fusion report: {} ({} kernels)\n", p.modelName, p.kernels.size());
  const std::vector<int> layers = kernelLayers(p);
  if (std::string summary = layerSummary(layers); !summary.empty()) out += fmt::format("// {}\n", summary);
  const std::vector<std::string> attention = attentionFusionRefusals(p);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    if (i == 0 || layers[i] != layers[i - 1]) out += fmt::format("\n// {}\n", layerName(layers[i]));
    out += fmt::format("\nkernel {} writes {} ({} stage{}, {} points)\n", k.name, p.buffers[k.output].name, k.stages.size(),
                       k.stages.size() == 1 ? "" : "s", k.parallelPoints());
    for (auto& o : k.origins) out += fmt::format("  holds {}\n", o);
    std::vector<std::string> readers;
    for (size_t c = i + 1; c < p.kernels.size(); ++c) {
      bool reads = false;
      forEachKernelRead(p.kernels[c], [&](int b, bool) { reads = reads || b == k.output; });
      if (reads) readers.push_back(p.kernels[c].name);
    }
    if (!attention[i].empty())
      out += fmt::format("  the p·v of an attention (loop-fuse-attention): not one kernel: {}\n", attention[i]);
    if (readers.empty()) continue;
    std::string why = fusionRefusal(p, static_cast<int>(i));
    if (!k.stages.empty())
      why += readers.size() > 1 ? fmt::format("; {} kernels read it, so neither loop-fuse-epilogues nor loop-fuse-rows applies", readers.size())
                                : "; its reader reads it neither pointwise (loop-fuse-epilogues) nor once per row (loop-fuse-rows)";
    out += fmt::format("  read by {}: not fused: {}\n", fmt::join(readers, ", "), why.empty() ? "no rule refused it" : why);
  }
  return out;
}

}  // namespace kiln::loop
