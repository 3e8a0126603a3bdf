// The Kernel-IR interpreter's TMA tensor copies (interpreter_machine.h; the rules are in kiln/kernel/ir.h at tmaLoad).
// The box lands when the copy is issued (threads run in lockstep, so every later statement comes after it), each element
// tagged with the phase of its mbarrier in progress: a thread may read it once it has waited for that phase
// (checkPhaseTag). The bytes then count against the phase's transaction count, which an arrive.expect_tx raised.
// A multicast copy lands the part of every block of the cluster: the statement evaluated with each one's blockIdx
// (clusterIssuers, which also checks that the cluster's blocks run the same statements alike; mbarrier.arrive on every
// block of the cluster uses it too).
#include <fmt/format.h>

#include "interpreter_machine.h"
#include "kiln/kernel/operand_layout.h"
#include "verifier_tma.h"

namespace kiln::kernel::interp {

namespace {
const char* kindName(const Stmt& s) {
  return s.kind == Stmt::Kind::MbarrierArriveCluster ? "mbarrier.arrive on every block of the cluster" : "multicast tma.load";
}
// The buffer a cluster-wide statement writes in every block: a multicast copy's destination, an arrival's mbarriers.
const std::string& clusterBufferName(const Kernel& k, const Stmt& s) {
  const int buffer = s.kind == Stmt::Kind::TmaLoad ? s.as<op::TmaLoad>().shared : op::mbarrierOf(s.op)->buffer;
  return k.shared[static_cast<size_t>(buffer)].name;
}
}  // namespace

std::array<int64_t, 4> Machine::clusterOperands(const Stmt& s, const std::vector<int64_t>& at) {
  if (s.kind == Stmt::Kind::MbarrierArriveCluster) return {evaluate(s.as<op::MbarrierArriveCluster>().barrier.index, at, &loader), 0, 0, 0};
  const auto& tma = s.as<op::TmaLoad>();
  return {evaluate(tma.sharedIndex, at, &loader), evaluate(tma.col, at, &loader), evaluate(tma.row, at, &loader),
          evaluate(tma.barrier.index, at, &loader)};
}

std::vector<std::vector<int64_t>> Machine::clusterIssuers(const Stmt& s, int64_t t) {
  const int64_t first = block - block % k.cluster, run = clusterRuns[{&s, t}]++;
  const std::array<int64_t, 4> own = clusterOperands(s, env[t]);
  std::vector<std::vector<int64_t>> envs;
  for (int64_t issuer = first; issuer < first + k.cluster; ++issuer) {
    std::vector<int64_t> at = env[t];
    at[kBlockIdx] = issuer;
    const std::array<int64_t, 4> operands = clusterOperands(s, at);
    // Every block of the cluster must see the same statement: what it issues, what the others assumed.
    auto [it, fresh] = clusterParts.try_emplace({&s, first, issuer - first, run}, ClusterPart{operands});
    if (!fresh && it->second.operands != operands)
      raise(fmt::format("kernel {}: thread {} of block {}: {} differs across the cluster ({} in one block, {} in another): its operands "
                        "must be the same in every block of the cluster but for blockIdx", k.name, t, issuer, kindName(s),
                        fmt::join(operands, ", "), fmt::join(it->second.operands, ", ")));
    if (issuer == block) it->second.issued = true;
    const bool sameBarrier = s.kind == Stmt::Kind::MbarrierArriveCluster ? operands[0] == own[0] : operands[3] == own[3];
    if (!sameBarrier)
      raise(fmt::format("kernel {}: thread {} of block {}: {} reaches a different mbarrier in block {} than here", k.name, t, block,
                        kindName(s), issuer));
    envs.push_back(std::move(at));
  }
  return envs;
}

std::vector<uint8_t> Machine::electedLanes(const std::vector<uint8_t>& mask, const Stmt& s) {
  std::vector<uint8_t> one(mask.size(), 0);
  for (int64_t w = 0; w * 32 < T; ++w) {
    const auto first = mask.begin() + w * 32, last = mask.begin() + std::min(T, (w + 1) * 32);
    const int64_t active = std::count(first, last, uint8_t{1});
    if (active == 0) continue;
    if (active != 32)
      raise(fmt::format("kernel {}: elected {} reached by {} of the 32 lanes of warp {} (block {}; elect.sync takes whole warps)",
                        k.name, s.kind == Stmt::Kind::TmaLoad ? "tma.load" : "mbarrier.arrive.expect_tx", active, w, block));
    one[static_cast<size_t>(w * 32)] = 1;
  }
  return one;
}

void Machine::tmaLoadStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  const auto& tma = s.as<op::TmaLoad>();
  KILN_ASSERT(tma.tensorMap >= 0 && tma.tensorMap < static_cast<int>(k.tensorMaps.size()), "kernel {}: tma.load from tensor map #{}",
              k.name, tma.tensorMap);
  const TensorMap& map = k.tensorMaps[static_cast<size_t>(tma.tensorMap)];
  const int dstBuffer = tma.shared;
  const SharedBuffer& sb = k.shared[dstBuffer];
  const std::vector<float>& src = paramData(map.param);
  const int64_t elemBytes = dtypeBytes(sb.dtype), box = detail::boxElements(k, tma);
  const SharedLayout boxLayout = tmaBoxLayout(map, elemBytes);
  const int64_t align = detail::tmaDestinationAlignment(k, tma);
  for (int64_t t = 0; t < T; ++t) {
    if (!mask[t]) continue;
    Mbarrier& m = mbarrierOf(s, t, "tma.load");  // the barrier the bytes complete on
    // this block's copy, or (multicast) the part of each block of its cluster
    for (const std::vector<int64_t>& at : tma.multicast ? clusterIssuers(s, t) : std::vector<std::vector<int64_t>>{env[t]}) {
      const std::array<int64_t, 4> part = clusterOperands(s, at);
      const int64_t dst = part[0], col0 = part[1], row0 = part[2];
      auto where = [&] {
        return fmt::format("kernel {}: thread {} of block {}: tma.load shared {}[{}] <- tensor map {} at row {}, column {}", k.name, t,
                           at[kBlockIdx], sb.name, dst, tma.tensorMap, row0, col0);
      };
      if (dst % align != 0 || dst < 0 || dst + box > sb.elements)
        raise(fmt::format("{}: the destination must be a multiple of {} elements with the box's {} inside the buffer's {}", where(),
                          align, box, sb.elements));
      const PhaseTag tag{tma.barrier.buffer, part[3], m.phase};
      for (int64_t r = 0; r < map.boxRows; ++r)
        for (int64_t c = 0; c < map.boxCols; ++c) {
          const int64_t row = row0 + r, col = col0 + c;
          const bool inside = row >= 0 && row < map.rows && col >= 0 && col < map.cols;
          const int64_t e = dst + boxLayout(0, r, c);  // dst is a multiple of the swizzle's atom
          if (async && inFlight[dstBuffer][e] >= 0)
            raise(fmt::format("{}: element {} is the destination of thread {}'s cp.async, not yet waited for", where(), e,
                              inFlight[dstBuffer][e]));
          if (wgmmaUsed && pinned[dstBuffer][e] > 0)
            raise(fmt::format("{}: element {} is read by a wgmma that has not been waited for", where(), e));
          shared[dstBuffer][e] = inside ? src[static_cast<size_t>(map.offset + row * map.rowStride + col)] : 0.f;
          written[dstBuffer][e] = 1;
          if (async) landed[dstBuffer][e] = -1;
          if (wgmmaUsed) unfenced[dstBuffer][e] = 0;  // written by the async proxy: wgmma needs no fence for it
          phaseTags[dstBuffer][static_cast<size_t>(e)] = tag;
        }
      m.tx -= box * elemBytes;
      countRead(map.param, box);
    }
    completeIfDone(m);
  }
}

void Machine::finishCluster() {
  for (const auto& [key, part] : clusterParts)
    if (!part.issued)
      raise(fmt::format("kernel {}: block {} never ran its {} on shared {} (run {} of the statement; its cluster's other blocks "
                        "counted on it)", k.name, std::get<1>(key) + std::get<2>(key), kindName(*std::get<0>(key)),
                        clusterBufferName(k, *std::get<0>(key)), std::get<3>(key)));
  clusterParts.clear();
}

}  // namespace kiln::kernel::interp
