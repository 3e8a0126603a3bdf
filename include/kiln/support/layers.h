// Which decoder layer each kernel of a compiled model belongs to, for `kiln compile -v` and `--explain-fusion`
// (issue 43: kernels per layer). A layer is named by the weights its kernels read: a weight whose name has a path
// component `layers`, `layer`, `h`, `blocks` or `block` followed by a number ("model.layers.12.mlp.up_proj.weight",
// GPT-2's "transformer.h.3.attn.c_attn.weight") belongs to that layer. A kernel reading such weights is in the layer of
// the first it reads; any other kernel (attention, residual adds, rotary, and those reading only weights of no layer,
// such as constant tables) is in the group of the kernel before it; the kernels before the first layer's are before
// the layers, and after the last layer's, those from the first one reading a weight of no layer on (the final norm,
// the LM head) are after them.
#pragma once
#include <string>
#include <vector>

namespace kiln {

inline constexpr int kBeforeLayers = -1, kAfterLayers = -2;

// The layer number in `weightName`, or -1 when it names none.
int layerOfWeight(const std::string& weightName);

// For each kernel (given as the names of the weights it reads, in launch order): its layer, kBeforeLayers or
// kAfterLayers.
std::vector<int> layersOfKernels(const std::vector<std::vector<std::string>>& weightsRead);

// One line: "12 kernels per layer in layers 0-21 (264), 1 before the layers, 3 after", or each layer's count where
// they differ ("layer 0: 13, layer 1: 12, ..."); "" when no kernel is in a layer.
std::string layerSummary(const std::vector<int>& layers);

}  // namespace kiln
