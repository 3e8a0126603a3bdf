// The compiler pipeline as one script (DESIGN.md §3.3), shared by the CLI and the tests.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kiln/cuda/emitter.h"
#include "kiln/frontend/frontend.h"
#include "kiln/kernel/ir.h"
#include "kiln/loop/ir.h"
#include "kiln/support/pipeline.h"
#include "kiln/support/target.h"
#include "kiln/tensor/ir.h"
#include "kiln/tile/ir.h"
#include "kiln/torch/ir.h"

namespace kiln {

struct Compiled {
  torch::Graph torchIR;
  tensor::Graph tensorIR;
  loop::Program loopIR;
  tile::Program tileIR;
  kernel::Program kernelIR;
  cuda::Module cudaIR;
};

// An in-level pass (one that rewrites its level's IR in place) as the pipeline runs it, under its passes.def name.
template <class IR>
struct InLevelPass {
  const char* name;
  std::function<bool(IR&)> run;
};
// Each level's in-level passes in pipeline order: what compileModel runs after the level's lowering, and what `kiln
// opt` looks a --passes name up in. (Each entry's comment says why it runs where it does.)
const std::vector<InLevelPass<loop::Program>>& loopPasses();
const std::vector<InLevelPass<tile::Program>>& tilePasses();
const std::vector<InLevelPass<kernel::Program>>& kernelPasses();

// Runs every pass up to and including the last pass of `untilLevel` (torch ... cuda). Throws
// StopRequested when opts.stopAfter names a pass that ran. Tile passes size schedules for `target`.
// The decoder layer of each kernel of p, from the weights it reads (kiln/support/layers.h): `kiln compile -v` prints
// the count per layer (layerSummary).
std::vector<int> kernelLayers(const kernel::Program& p);

Compiled compileModel(const std::string& modelPath, const std::vector<frontend::InputOverride>& inputs,
                      const PipelineOptions& opts, const std::string& untilLevel = "cuda",
                      std::optional<DType> castTo = std::nullopt, const Target& target = defaultTarget());

// The text (or JSON) of one level of a compiled model.
std::string printLevel(const Compiled& c, const std::string& level, bool json = false);

}  // namespace kiln
