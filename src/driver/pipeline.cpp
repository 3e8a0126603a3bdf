#include "kiln/driver/pipeline.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/support/layers.h"

#include <algorithm>
#include <cctype>
#include <iostream>
#include <variant>

#include "kiln/kernel/lower.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {
int levelIndex(const std::string& level) {
  const auto& levels = allLevels();
  auto it = std::find(levels.begin(), levels.end(), level);
  KILN_ASSERT(it != levels.end(), "unknown level '{}'", level);
  return static_cast<int>(it - levels.begin());
}

// loop::inPlaceStates over the kernels as scheduled, kept where the writer is a pointwise map (each thread reads the
// elements it writes) and no later kernel of the Kernel program binds the state's current value.
std::vector<std::pair<int, int>> statesInPlace(const tile::Program& t, const kernel::Program& k, size_t states) {
  std::vector<std::pair<int, int>> kept;
  for (auto [output, input] : loop::inPlaceStates(t.loop, states)) {
    int writer = -1;
    for (size_t i = 0; i < t.loop.kernels.size(); ++i)
      if (t.loop.kernels[i].output == output) writer = static_cast<int>(i);
    if (writer < 0 || !std::holds_alternative<tile::PointwiseMap>(t.schedules[static_cast<size_t>(writer)])) continue;
    bool readAfter = false, written = false;
    for (const kernel::Kernel& kk : k.kernels) {
      const bool writes = std::any_of(kk.params.begin(), kk.params.end(),
                                      [&](const kernel::Param& prm) { return prm.written && prm.buffer == output; });
      const bool binds = std::any_of(kk.params.begin(), kk.params.end(),
                                     [&](const kernel::Param& prm) { return prm.buffer == input; });
      readAfter = readAfter || (written && binds);
      written = written || writes;
    }
    if (written && !readAfter) kept.emplace_back(output, input);
  }
  return kept;
}

// The forward's outputs named as the model names them (the keys of a dict it returns, torch::Graph::outputNames)
// instead of out0, out1, ...: where the name is letters, digits and underscores, not starting with a digit, and no
// other buffer's (a buffer name is also a kernel parameter's and a manifest entry's); otherwise the buffer keeps its
// own.
void nameOutputs(loop::Program& p, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size() && i < p.outputs.size(); ++i) {
    const std::string& name = names[i];
    const bool identifier = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                            std::all_of(name.begin(), name.end(), [](char ch) {
                              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                            });
    const bool taken = std::any_of(p.buffers.begin(), p.buffers.end(), [&](const loop::Buffer& b) { return b.name == name; });
    if (identifier && !taken) p.buffers[static_cast<size_t>(p.outputs[i])].name = name;
  }
}

}  // namespace

const std::vector<InLevelPass<loop::Program>>& loopPasses() {
  static const std::vector<InLevelPass<loop::Program>> passes = {
      {"loop-mask-predicates", loop::maskPredicates},  // before fusion copies the mask's loads around
      {"loop-index-comparisons", loop::indexComparisons},  // before fusion: index-only producers inline anywhere
      {"loop-fuse-epilogues", loop::fuseEpilogues},  // before inlining: keeps a residual stream materialised
      {"loop-fuse-producers", loop::fuseProducers},  // producers in topological order
      {"loop-fuse-rows", loop::fuseRows},  // after inlining: consumers hold their whole row
      {"loop-reciprocal-row-divisors", loop::reciprocalRowDivisors},  // after the rows are formed
      {"loop-fuse-attention", loop::fuseAttention},  // after the softmax rows are formed
      {"loop-fuse-norm-products", loop::fuseNormProducts},  // after attention has taken its softmax rows
      {"loop-batch-expert-products", loop::batchExpertProducts},  // after fusion: the product's readers are final
      {"loop-eliminate-dead-buffers", loop::eliminateDeadBuffers},  // removes what fusion inlined
  };
  return passes;
}

const std::vector<InLevelPass<tile::Program>>& tilePasses() {
  static const std::vector<InLevelPass<tile::Program>> passes = {
      {"tile-cooperative-reduce", tile::cooperativeReduce},
      {"tile-vectorize-accesses", tile::vectorizeAccesses},  // after the row reductions are chosen
      {"tile-vectorize-reductions", tile::vectorizeReductions},
      {"tile-walk-stages-together", tile::walkStagesTogether},  // after the reduction vectors are chosen
      {"tile-tiled-contractions", [](tile::Program& p) { return tile::tileContractions(p); }},
      {"tile-tile-long-reductions", tile::tileLongReductions},
      {"tile-tensor-core-contractions", tile::tensorCoreContractions},
      {"tile-fuse-operand-producers", tile::fuseOperandProducers},
      {"tile-balance-attention", tile::balanceAttention},  // after the block's rows are final
      {"tile-deepen-attention-steps", tile::deepenAttentionSteps},  // after the grid is final
      {"tile-interleave-attention-rows", tile::interleaveAttentionRows},  // unpaired blocks only
      {"tile-sum-attention-rows-by-mma", tile::sumAttentionRowsByMma},
      {"tile-attention-scores-by-wgmma", tile::attentionScoresByWgmma},  // after the block's rows and steps
      {"tile-attention-values-by-wgmma", tile::attentionValuesByWgmma},  // after the block's rows
      {"tile-attention-scores-ahead", tile::attentionScoresAhead},  // after the ring and the scores' instruction
      {"tile-pack-attention-pairs", tile::packAttentionPairs},  // after every pass sizing the block's threads and shared memory
      {"tile-share-kv-heads", tile::shareKvHeads},  // one-token attention: before its keys are split
      {"tile-split-attention-keys", [](tile::Program& p) { return tile::splitAttentionKeys(p); }},  // unpaired, unpacked grids
      {"tile-warpgroup-products", tile::warpgroupProducts},  // the operands are final; before their shape
      {"tile-shape-products", [](tile::Program& p) { return tile::shapeProducts(p); }},  // after operand fusion: the operands are final
      {"tile-stack-operands", tile::stackOperands},  // after tile_n is sized
      {"tile-deepen-rings", tile::deepenRings},  // after the tile (the grid) is sized
      {"tile-overlap-wgmma", tile::overlapWgmma},  // after the ring is sized
      {"tile-tma-copies", tile::tmaCopies},  // after the ring passes, which shape cp_async rings
      {"tile-specialize-warps", [](tile::Program& p) { return tile::specializeWarps(p); }},  // after tile-tma-copies
      {"tile-multicast-operands", tile::multicastOperands},  // products with a producer warp only
      {"tile-stream-k-products", [](tile::Program& p) { return tile::streamKProducts(p); }},  // after the clusters
      {"tile-unroll-rings", tile::unrollRings},  // products with a producer warp only
      {"tile-mma-operand-pairs", tile::pairMmaOperands},  // before the depth: halves the slices' bytes
      {"tile-deep-k-slices", tile::deepenKSlices},
      {"tile-pipeline-async-copies", tile::pipelineAsyncCopies},  // after the slice depth and layout
      {"tile-prefetch-slices", tile::prefetchSlices},  // after the slice depth is chosen
      {"tile-stream-ffma-products", tile::streamFfmaProducts},  // last: replaces the CUDA-core schedule whole
  };
  return passes;
}

const std::vector<InLevelPass<kernel::Program>>& kernelPasses() {
  static const std::vector<InLevelPass<kernel::Program>> passes = {
      {"kernel-multicast-operands", kernel::multicastOperands},  // reads the lowering's marks on tensor maps
      {"kernel-unroll-rings", kernel::unrollRings},  // reads the lowering's marks on ring loops
      {"kernel-store-only-changes", kernel::storeOnlyChanges},  // reads inPlace; before merging changes the bodies
      {"kernel-launch-only-changes", kernel::launchOnlyChanges},  // after the stores are guarded; before merging
      {"kernel-merge-launches", kernel::mergeLaunches},  // reads inPlace: a state written in place is one buffer
      {"kernel-finish-in-last-block", kernel::finishInLastBlock},  // after merging: a merged launch is one tail
      {"kernel-overlap-launches", kernel::overlapLaunches},
  };
  return passes;
}

Compiled compileModel(const std::string& modelPath, const std::vector<frontend::InputOverride>& inputs,
                      const PipelineOptions& opts, const std::string& untilLevel, std::optional<DType> castTo,
                      const Target& target) {
  const int until = levelIndex(untilLevel);
  // Read first: a bad --product-shapes file is reported before any work.
  const std::vector<tile::TabledShape> shapes = opts.productShapes.empty() ? std::vector<tile::TabledShape>{}
                                                                           : tile::readProductShapes(opts.productShapes);
  PassRunner run(opts);
  Compiled c;

  c.torchIR = run.produce("torch-import", [&] {
    torch::Graph g = frontend::importModel(modelPath, inputs, castTo);
    if (opts.greedyTokens) torch::appendGreedyToken(g);
    return g;
  });
  run.pass(c.torchIR, "torch-eliminate-dead-code", torch::eliminateDeadCode);
  if (until < 1) return run.printTimings(), c;

  c.tensorIR = run.produce("tensor-lower-from-torch", [&] { return tensor::lowerFromTorch(c.torchIR); });
  run.pass(c.tensorIR, "tensor-compose-index-maps", tensor::composeIndexMaps);
  run.pass(c.tensorIR, "tensor-shard", [&](tensor::Graph& g) {  // before merging: q, k and v are split apart
    if (opts.tensorParallel <= 1 && opts.rank == 0) return false;
    tensor::shardForTensorParallel(g, opts.tensorParallel, opts.rank);
    return opts.tensorParallel > 1;
  });
  run.pass(c.tensorIR, "tensor-merge-parallel-linears", tensor::mergeParallelLinears);  // needs composed maps
  run.pass(c.tensorIR, "tensor-fold-constants", tensor::foldConstants);          // after composing: sees weights through one map
  run.pass(c.tensorIR, "tensor-fold-index-wraps", tensor::foldIndexWraps);       // after folding: constant indices are weights
  run.pass(c.tensorIR, "tensor-eliminate-dead-code", tensor::eliminateDeadCode);  // drops maps composed away
  if (until < 2) return run.printTimings(), c;

  c.loopIR = run.produce("loop-lower-from-tensor", [&] {
    loop::Program p = loop::lowerFromTensor(c.tensorIR);
    nameOutputs(p, c.torchIR.outputNames);
    return p;
  });
  for (const auto& pass : loopPasses()) run.pass(c.loopIR, pass.name, pass.run);
  if (until < 3) return run.printTimings(), c;

  c.tileIR = run.produce("tile-lower-from-loop", [&] {
    tile::Program p = tile::lowerFromLoop(c.loopIR, target);
    p.productShapes = shapes;
    return p;
  });
  for (const auto& pass : tilePasses()) run.pass(c.tileIR, pass.name, pass.run);
  if (until < 4) return run.printTimings(), c;

  kernel::LowerStats lowering;
  c.kernelIR = run.produce("kernel-lower-from-tile", [&] { return kernel::lowerFromTile(c.tileIR, {}, &lowering); });
  if (opts.verbosity > 0)  // identical decoder layers are lowered once
    (opts.log ? *opts.log : std::cerr) << fmt::format("  {} kernels: {} lowered, {} copied from an identical kernel\n",
                                                      c.kernelIR.kernels.size(), lowering.lowered, lowering.reused);
  c.kernelIR.inPlace = statesInPlace(c.tileIR, c.kernelIR, c.torchIR.states.size());
  for (const auto& pass : kernelPasses()) run.pass(c.kernelIR, pass.name, pass.run);
  if (opts.verbosity > 0)  // issue 43: how many kernels each decoder layer takes
    if (std::string layers = layerSummary(kernelLayers(c.kernelIR)); !layers.empty())
      (opts.log ? *opts.log : std::cerr) << fmt::format("kiln: {} kernels: {}\n", c.kernelIR.kernels.size(), layers);
  if (until < 5) return run.printTimings(), c;

  c.cudaIR = run.produce("cuda-emit", [&] { return cuda::emit(c.kernelIR); });
  run.printTimings();
  return c;
}

std::vector<int> kernelLayers(const kernel::Program& p) {
  std::vector<std::vector<std::string>> weights;
  for (const kernel::Kernel& k : p.kernels) {
    weights.emplace_back();
    for (const auto& param : k.params)
      if (p.buffers.at(static_cast<size_t>(param.buffer)).kind == loop::Buffer::Kind::Weight)
        weights.back().push_back(p.buffers[static_cast<size_t>(param.buffer)].name);
  }
  return layersOfKernels(weights);
}

std::string printLevel(const Compiled& c, const std::string& level, bool json) {
  switch (levelIndex(level)) {
    case 0: return json ? torch::toJson(c.torchIR).dump(2) + "\n" : torch::print(c.torchIR);
    case 1: return json ? tensor::toJson(c.tensorIR).dump(2) + "\n" : tensor::print(c.tensorIR);
    case 2: return json ? loop::toJson(c.loopIR).dump(2) + "\n" : loop::print(c.loopIR);
    case 3: return json ? tile::toJson(c.tileIR).dump(2) + "\n" : tile::print(c.tileIR);
    case 4: return json ? kernel::toJson(c.kernelIR).dump(2) + "\n" : kernel::print(c.kernelIR);
    default: return json ? cuda::toJson(c.cudaIR).dump(2) + "\n" : cuda::print(c.cudaIR);
  }
}

}  // namespace kiln
