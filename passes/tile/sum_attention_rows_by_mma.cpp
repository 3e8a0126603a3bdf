// tile-sum-attention-rows-by-mma: the online softmax adds each probability into its row's running sum, 16 additions per
// thread and row group for every 16 keys (a quarter of a step's non-tensor-core instructions at head dim 64), and the
// four lanes sharing a row add theirs by shuffles at the end. The probabilities are already packed into the A fragment
// of P·V; one more mma.sync of that fragment with a B fragment of ones (FlashAttention::rowSumsByMma) adds all 16 keys of
// both rows, over the quad, in one instruction.
// Rule: every tensor-core flash attention.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool sumAttentionRowsByMma(Program& p) {
  bool changed = false;
  for (auto& s : p.schedules) {
    auto* f = std::get_if<FlashAttention>(&s);
    if (!f || flashOnCudaCores(*f) || f->rowSumsByMma) continue;
    f->rowSumsByMma = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
