// tile-split-attention-keys: under a causal mask query block qb of a row walks about qb + 1 steps of keys, and a block
// walks its steps one after another, each step a chain of dependent tensor-core work, exponentials and shuffles at one
// warp per 16 rows. The GPU then waits for the heaviest blocks' chains: Qwen2.5-7B's heads at 512 tokens (head dim 128,
// 8 query blocks of 64, steps of 64 keys) take 8 steps in their last block, while the mean is 4.5, and the SMs that
// finish their light blocks early idle. Splitting the keys of each of the heavier half of a row's query blocks over two
// blocks (FlashAttention::splitKeys), each walking half of the steps, shortens the longest chain to about QB / 2 steps
// at the price of one more block per split query block, a store of each half's maxima, sums and unnormalised outputs
// (f32, 68 values a thread at head dim 128), a ticket per block and the second half's reading the first's and combining.
// Rule: tensor-core flash attention of 16-row warps, no key split, unpaired, causal (keyTo, no keyFrom) whose heaviest
// query block walks kMinSplitAttentionSteps (6) or more steps and whose lightest split block walks 2 or more: TinyLlama's
// heads at 512 tokens (4 steps of 128 keys) stay whole.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool splitAttentionKeys(Program& p, int64_t minSteps) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    const loop::Kernel& k = p.loop.kernels[i];
    if (!f || f->splitKeys || flashOnCudaCores(*f) || f->warpRows != 16 || f->keySplit != 1 || f->pairBlocks || !f->keyTo ||
        f->keyFrom || flashQueryBlocks(*f, k) < 4)
      continue;
    const int64_t lk = k.attention->key.extent, heaviest = ceilDiv(std::min(lk, k.parallel[static_cast<size_t>(f->queryAxis)].extent - 1 + *f->keyTo), f->blockKV);
    if (heaviest < minSteps) continue;
    FlashAttention split = *f;
    split.splitKeys = true;
    if (flashLightestSplitSteps(split, k) < 2) continue;
    const int64_t rows = k.rowPoints() / k.parallel[static_cast<size_t>(f->queryAxis)].extent, blocks = flashSplitBlocks(split, k);
    const auto width = k.parallel[static_cast<size_t>(k.rowAxes)].extent;
    loop::Buffer counters{loop::Buffer::Kind::Counters, k.name + "_tickets", DType::I64, {rows * blocks}, nullptr};
    loop::Buffer halves{loop::Buffer::Kind::Temp, k.name + "_halves", DType::F32,
                        {rows * blocks * 2, flashCombineValues(width), threadsPerBlock(split)}, nullptr};
    split.counters = static_cast<int>(p.loop.buffers.size());
    p.loop.buffers.push_back(counters);
    split.partials = static_cast<int>(p.loop.buffers.size());
    p.loop.buffers.push_back(halves);
    *f = split;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
