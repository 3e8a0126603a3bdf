// tile-sum-attention-rows-by-mma: the online softmax adds each probability into its row's running sum, 16 additions per
// thread and row group for every 16 keys (a quarter of a step's non-tensor-core instructions at head dim 64), and the
// four lanes sharing a row add theirs by shuffles at the end. The probabilities are already packed into the A fragment
// of P·V; one more mma.sync of that fragment with a B fragment of ones (FlashAttention::rowSumsByMma) adds all 16 keys of
// both rows, over the quad, in one instruction.
// Rule: tensor-core flash attention whose output rows are at most 64 wide. Wider rows give P·V twice the mma.sync per
// step, and there the extra mma.sync cost more than the additions it saves: measured on the H200 at 512 tokens (hot µs,
// with against without), Qwen2.5-7B's heads (128 wide) 14.7 against 14.4 (daabbd8) and 14.6 against 14.2 (64c33d7, a
// second call); TinyLlama's (64 wide) 9.7 against 10.6 and 9.3 against 10.2.
#include "kiln/loop/attention.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {
constexpr int64_t kMaxWidthSummedByMma = 64;
}  // namespace

bool sumAttentionRowsByMma(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || flashOnCudaCores(*f) || f->rowSumsByMma) continue;
    const auto o = loop::flashAttentionOperands(p.loop, p.loop.kernels[i]);
    if (!o || o->width > kMaxWidthSummedByMma) continue;
    f->rowSumsByMma = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
