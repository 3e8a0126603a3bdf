#include "kiln/support/layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <map>
#include <sstream>

namespace kiln {

int layerOfWeight(const std::string& weightName) {
  std::vector<std::string> parts;
  std::stringstream in(weightName);
  for (std::string part; std::getline(in, part, '.');) parts.push_back(part);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& p = parts[i];
    const std::string& n = parts[i + 1];
    const bool layerWord = p == "layers" || p == "layer" || p == "h" || p == "blocks" || p == "block";
    if (!layerWord || n.empty() || n.size() > 6) continue;
    bool digits = true;
    for (char ch : n) digits = digits && std::isdigit(static_cast<unsigned char>(ch));
    if (digits) return std::stoi(n);
  }
  return -1;
}

std::vector<int> layersOfKernels(const std::vector<std::vector<std::string>>& weightsRead) {
  const size_t n = weightsRead.size();
  std::vector<int> own(n, -1);  // the layer of the first layered weight each kernel reads
  for (size_t k = 0; k < n; ++k)
    for (const std::string& w : weightsRead[k])
      if (own[k] < 0) own[k] = layerOfWeight(w);
  size_t last = n;  // the last kernel reading a layer's weights
  for (size_t k = 0; k < n; ++k)
    if (own[k] >= 0) last = k;
  std::vector<int> layers(n, kBeforeLayers);
  int current = kBeforeLayers;
  for (size_t k = 0; k < n; ++k) {
    if (own[k] >= 0) current = own[k];
    // After the last layer: from the first kernel reading weights of no layer (the final norm, the LM head) on.
    else if (last < n && k > last && !weightsRead[k].empty()) current = kAfterLayers;
    layers[k] = current;
  }
  return layers;
}

std::string layerSummary(const std::vector<int>& layers) {
  std::map<int, int> count;  // layer -> kernels
  int before = 0, after = 0;
  for (int l : layers) {
    if (l == kBeforeLayers) ++before;
    else if (l == kAfterLayers) ++after;
    else ++count[l];
  }
  if (count.empty()) return "";
  const int first = count.begin()->first, last = count.rbegin()->first;
  bool uniform = static_cast<int>(count.size()) == last - first + 1;
  for (const auto& [layer, n] : count) uniform = uniform && n == count.begin()->second;
  std::string text;
  if (uniform) {
    text = fmt::format("{} kernels per layer in layers {}-{} ({})", count.begin()->second, first, last,
                       count.begin()->second * static_cast<int>(count.size()));
  } else {
    std::vector<std::string> each;
    for (const auto& [layer, n] : count) each.push_back(fmt::format("layer {}: {}", layer, n));
    text = fmt::format("kernels per layer: {}", fmt::join(each, ", "));
  }
  return text + fmt::format(", {} before the layers, {} after", before, after);
}

}  // namespace kiln
