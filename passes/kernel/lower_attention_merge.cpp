// kernel-lower-from-tile for FlashAttention schedules: merging the partial rows of threads that walked different keys of
// the same query rows (lower_attention.cpp describes the kernel). A partial row is a running maximum m, a sum l of
// 2^((s - m) F) over its keys and outputs O = sum of 2^((s - m) F) v; two merge exactly into the row over both key sets:
// m' = max(m, m2), l' = l 2^((m - m') F) + l2 2^((m2 - m') F), O' likewise (m' = -inf, rows that have seen no key yet,
// counts as 0, so that an empty partial adds nothing).
//   Key-split warps (FlashAttention::keySplit): the warps of keys 1.. hand their rows to the warp of keys 0 through the
//     shared slice `comb` (same lane, same elements), which merges them after a barrier.
//   Blocks sharing a query block's key steps (FlashAttention::keyBlocks, flash-decoding): every block stores its rows'
//     partials (the finishing threads' maxima, sums and outputs: value i of thread t of block b = run x items + item
//     at partials[(b V + i) T + t], V tile::flashPartialValues, T the block's threads) and takes a ticket at its query
//     block's counter (kernel::blockTicket: the stores released, the counter back to zero at the last ticket); the
//     block with the last ticket starts from an empty row, merges the keyBlocks partials in the order of their runs (its
//     own among them) and stores the output. With a run-time key limit inside the first step (a decoder step early in
//     its cache) the one run that walks that step stores the output itself, and no block stores partials or takes a
//     ticket.
#include <fmt/format.h>

#include <limits>

#include "kernel_builder.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

// Row r of the thread (its maximum, sum and outputs) merged with a partner's; theirs(i) is the partner's value i in the
// order maxima of the thread's rows, their sums, then its outputs (Flash::outputs).
void KernelBuilder::flashMergeRow(const Flash& x, int r, const std::function<FE(int64_t)>& theirs, Block& out) {
  const int64_t rows = static_cast<int64_t>(x.runningMax.size());
  const int m = x.runningMax[r], l = x.runningSum[r], mNew = x.safeMax[r], alpha = x.rescale[r], partner = x.shuffleSlot;
  out.push_back(assign(mNew, fapply(Fn::Max, {fvar(m), theirs(r)})));
  FE safe = fapply(Fn::Where, {fapply(Fn::Eq, {fvar(mNew), fconst(-kInf)}), fconst(0.f), fvar(mNew)});
  out.push_back(assign(alpha, exp2Of(fapply(Fn::Sub, {fvar(m), safe}), x.exp2Factor())));
  out.push_back(assign(partner, exp2Of(fapply(Fn::Sub, {theirs(r), safe}), x.exp2Factor())));
  out.push_back(assign(m, fvar(mNew)));
  out.push_back(assign(l, fapply(Fn::Add, {fapply(Fn::Mul, {fvar(l), fvar(alpha)}), fapply(Fn::Mul, {theirs(rows + r), fvar(partner)})})));
  for (size_t i = 0; i < x.outputs.size(); ++i) {
    if (x.outputs[i].row != r) continue;
    const int o = x.outputs[i].reg;
    out.push_back(assign(o, fapply(Fn::Add, {fapply(Fn::Mul, {fvar(o), fvar(alpha)}),
                                             fapply(Fn::Mul, {theirs(2 * rows + static_cast<int64_t>(i)), fvar(partner)})})));
  }
}

// Value i of thread (rg, lane) of warp kh at comb[((kh - 1) * values + i) * rowGroups * 32 + rg * 32 + lane]; a key
// split has one row group per warp (two rows), so a thread's values are m0, m1, l0, l1 and its outputs.
void KernelBuilder::flashCombineWarps(const Flash& x, Block& out, Block& finish) {
  const int64_t values = tile::flashCombineValues(x.width), lanes = x.rowGroups * Target::kWarpSize;
  KILN_ASSERT(x.runningMax.size() == 2 && static_cast<int64_t>(4 + x.outputs.size()) == values,
              "kernel {}: a key split's warps hand over {} values, not {}", lk_.name, 4 + x.outputs.size(), values);
  std::vector<int> mine{x.runningMax[0], x.runningMax[1], x.runningSum[0], x.runningSum[1]};
  for (const Flash::Element& e : x.outputs) mine.push_back(e.reg);
  const Idx thread = simplify(x.rowGroup * idxConst(Target::kWarpSize) + x.lane, extents_);
  auto at = [&](const Idx& partner, int64_t i) { return simplify((partner * idxConst(values) + idxConst(i)) * idxConst(lanes) + thread, extents_); };
  Block hand;
  for (int64_t i = 0; i < values; ++i) hand.push_back(storeShared(x.combineSlice, at(idxAdd(x.keyShare, -1), i), fvar(mine[static_cast<size_t>(i)])));
  out.push_back(ifLess(idxConst(0), x.keyShare, std::move(hand)));
  out.push_back(barrier());
  for (int64_t partner = 0; partner + 1 < x.keySplit; ++partner)
    for (int r = 0; r < 2; ++r)
      flashMergeRow(x, r, [&](int64_t i) { return loadShared(x.combineSlice, at(idxConst(partner), i)); }, finish);
}

void KernelBuilder::flashCombineBlocks(const Flash& x, Block& out, Block merged, Block store) {
  const tile::FlashAttention& f = *x.schedule;
  const int64_t runs = x.keyBlocks, items = k_.grid[0] / runs, threads = x.threads;
  const int64_t values = tile::flashPartialValues(f, lk_);
  std::vector<int> mine(x.runningMax);
  mine.insert(mine.end(), x.runningSum.begin(), x.runningSum.end());
  for (const Flash::Element& e : x.outputs) mine.push_back(e.reg);
  KILN_ASSERT(static_cast<int64_t>(mine.size()) == values, "kernel {}: a block's partials are {} values a thread, not {}",
              lk_.name, mine.size(), values);
  const int partials = param(f.partials, true), counters = param(f.counters, true);
  auto at = [&](const Idx& run, int64_t i) {
    return simplify(((run * idxConst(items) + x.item) * idxConst(values) + idxConst(i)) * idxConst(threads) + threadIdx(), extents_);
  };
  auto finishing = [&](Block b) {  // the warps of keys 0 only, where warps split the keys
    if (x.keySplit == 1) return b;
    return Block{ifLess(x.keyShare, idxConst(1), std::move(b))};
  };
  // A run-time key limit inside the first step (a decoder step early in its cache): the one run that walks that step,
  // the last (run r walks [floor(r n / R), floor((r + 1) n / R)) of n = 1), holds every key the rows see and stores the
  // output itself; no partials, no tickets (every block of the query block takes this branch or none does).
  Block direct;
  if (x.liveSteps) {
    direct = merged;
    direct.insert(direct.end(), store.begin(), store.end());
    direct = {ifLess(idxConst(runs - 2), x.keyRun, finishing(std::move(direct)))};
  }
  Block split;
  for (size_t i = 0; i < mine.size(); ++i) merged.push_back(storeGlobal(partials, at(x.keyRun, static_cast<int64_t>(i)), fvar(mine[i])));
  for (Stmt& s : finishing(std::move(merged))) split.push_back(std::move(s));
  const int ticketVar = freshKernelVar();
  extents_[ticketVar] = runs;
  split.push_back(blockTicket(ticketVar, "ticket", counters, x.item, runs));
  Block last;
  for (size_t r = 0; r < x.runningMax.size(); ++r) {
    last.push_back(assign(x.runningMax[r], fconst(-kInf)));
    last.push_back(assign(x.runningSum[r], fconst(0.f)));
  }
  for (const Flash::Element& e : x.outputs) last.push_back(assign(e.reg, fconst(0.f)));
  const int runVar = freshKernelVar();
  extents_[runVar] = runs;
  Block each;
  for (int r = 0; r < static_cast<int>(x.runningMax.size()); ++r)
    flashMergeRow(x, r, [&](int64_t i) { return loadGlobal(partials, at(idxVar(runVar, "kb"), i)); }, each);
  last.push_back(forLoop(runVar, "kb", idxConst(0), idxConst(runs), 1, std::move(each)));
  last.insert(last.end(), store.begin(), store.end());
  split.push_back(ifLess(idxConst(runs - 2), idxVar(ticketVar, "ticket"), finishing(std::move(last))));
  if (!x.liveSteps) {
    out.insert(out.end(), split.begin(), split.end());
    return;
  }
  out.push_back(ifLess(x.liveSteps, idxConst(2), std::move(direct)));
  out.push_back(ifLess(idxConst(1), x.liveSteps, std::move(split)));
}

}  // namespace kiln::kernel::detail
