// tile-cooperative-reduce: gives a block to each row of a kernel that writes a whole row after its stages
// (a fused softmax or RMSNorm), or whose reductions are long (some stage reduces at least
// kCooperativeReduceMinExtent points) while its outputs are too few to occupy the GPU one thread each
// (fewer than kCooperativeReduceMaxOutputs: a small matmul), or that is a matrix-vector product with a long reduction
// however many outputs it has (a decode step's LM head: 32000 threads each reading a weight row of 2048 alone, serially
// and uncoalesced, took 12 times the time its bytes need on an H100; a block per row reads it as whole sectors). Its threads (threadsPerRow: the longest stage or row rounded up to a power of two,
// 32..256) stride over each reduction, combine partial results by warp shuffles (and the warps' totals through shared
// memory), then stride over the row's outputs. Short reductions stay serial per thread, where one thread's loop is cheaper than a
// block-wide combine.
// Matrix products with at least 16 rows and 16 columns and a reduction of kTiledContractionLongReduction or more are left to
// the tiled schedules (tile-tile-long-reductions tiles them, the product passes stream and split them): a block per output
// re-reads a whole operand row for every output (TinyLlama's k projection at 32 tokens: 8192 blocks each reading 8 KB of
// activations and 8 KB of weights), where a tile reads each once per tile.
#include <algorithm>

#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {
namespace {

// Whether e reads an output axis of extent above 1.
bool readsOutput(const loop::Kernel& k, const loop::ExprP& e) {
  bool reads = false;
  for (const loop::Axis& a : k.parallel) reads = reads || (a.extent > 1 && loop::usesVar(*e, a.var));
  return reads;
}

// The outputs that share each value of e: the points of the output axes e does not read.
int64_t outputsSharing(const loop::Kernel& k, const loop::ExprP& e) {
  int64_t points = 1;
  for (const loop::Axis& a : k.parallel)
    if (!loop::usesVar(*e, a.var)) points *= a.extent;
  return points;
}

// Outputs that must share a factor for it to be a product's vector.
constexpr int64_t kMinVectorSharing = 16;

// A matrix-vector product: sums of a product one of whose factors reads none of the output axes of extent above 1
// (the vector, the same for every output), or a vector per few rows that many outputs share each (a decoder step's
// expert products: each (token, choice) row's activations against the rows of the expert matrix it picked, 28672
// outputs sharing each of two vectors in a Mixtral-shaped layer); other stages may be sums that read no output axis at
// all (the statistics of a normalised row, loop-fuse-norm-products), and one stage at least is such a product.
bool isVectorProduct(const loop::Kernel& k) {
  bool product = false;
  for (const loop::Reduction& s : k.stages) {
    if (s.fn != tensor::ReduceFn::Sum) return false;
    if (!readsOutput(k, s.value)) continue;
    const loop::ExprP& v = s.value;
    if (v->kind != loop::Expr::Kind::Apply || v->fn != tensor::Fn::Mul) return false;
    if (std::none_of(v->args.begin(), v->args.end(), [&](const loop::ExprP& f) {
          return !readsOutput(k, f) || outputsSharing(k, f) >= kMinVectorSharing;
        }))
      return false;
    product = true;
  }
  return product;
}

}  // namespace

bool cooperativeReduce(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const loop::Kernel& k = p.loop.kernels[i];
    if (k.stages.empty() || std::holds_alternative<RowReduction>(p.schedules[i])) continue;
    int64_t longest = 1;
    for (auto& s : k.stages) {
      int64_t extent = 1;
      for (auto& a : s.axes) extent *= a.extent;
      longest = std::max(longest, extent);
    }
    int64_t perRow = k.parallelPoints() / k.rowPoints();
    const bool vectorProduct = perRow == 1 && isVectorProduct(k);
    bool fewLongReductions =
        longest >= kCooperativeReduceMinExtent && (k.rowPoints() < kCooperativeReduceMaxOutputs || vectorProduct);
    if (perRow == 1 && !fewLongReductions) continue;
    if (perRow == 1)
      if (auto c = findContraction(k); c && c->m >= 16 && c->n >= 16 && c->k >= kTiledContractionLongReduction) continue;
    int64_t threads = 32;
    while (threads < std::max(longest, perRow) && threads < 256) threads *= 2;
    RowReduction r;
    r.threadsPerRow = threads;
    r.combine = RowReduction::Combine::WarpShuffle;
    p.schedules[i] = r;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
