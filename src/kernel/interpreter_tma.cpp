// The Kernel-IR interpreter's TMA tensor copies (interpreter_machine.h; the rules are in kiln/kernel/ir.h at tmaLoad).
// The box lands when the copy is issued (threads run in lockstep, so every later statement comes after it), each element
// tagged with the phase of its mbarrier in progress: a thread may read it once it has waited for that phase
// (checkPhaseTag). The bytes then count against the phase's transaction count, which an arrive.expect_tx raised.
// A multicast copy lands the part of every block of the cluster: the statement evaluated with each one's blockIdx.
#include <fmt/format.h>

#include "interpreter_machine.h"
#include "verifier_tma.h"

namespace kiln::kernel::interp {

void Machine::tmaLoadStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  KILN_ASSERT(s.tensorMap >= 0 && s.tensorMap < static_cast<int>(k.tensorMaps.size()) && s.coords.size() == 2,
              "kernel {}: tma.load from tensor map #{}", k.name, s.tensorMap);
  const TensorMap& map = k.tensorMaps[static_cast<size_t>(s.tensorMap)];
  const SharedBuffer& sb = k.shared[s.target];
  const std::vector<float>& src = paramData(map.param);
  const int64_t elemBytes = dtypeBytes(sb.dtype), chunk = 16 / elemBytes, box = detail::boxElements(k, s);
  const int64_t align = detail::tmaDestinationAlignment(k, s);
  const int64_t parts = s.multicast ? k.cluster : 1, first = block - block % parts;
  for (int64_t t = 0; t < T; ++t) {
    if (!mask[t]) continue;
    Mbarrier& m = mbarrierOf(s, t, "tma.load");  // the barrier the bytes complete on
    const int64_t run = s.multicast ? multicastRuns[{&s, t}]++ : 0;
    for (int64_t issuer = first; issuer < first + parts; ++issuer) {  // this block, or each block of its cluster
      std::vector<int64_t> at = env[t];
      at[kBlockIdx] = issuer;
      const std::array<int64_t, 4> part{evaluate(s.a, at, &loader), evaluate(s.coords[0], at, &loader),
                                        evaluate(s.coords[1], at, &loader), evaluate(s.b, at, &loader)};
      const int64_t dst = part[0], col0 = part[1], row0 = part[2];
      auto where = [&] {
        return fmt::format("kernel {}: thread {} of block {}: tma.load shared {}[{}] <- tensor map {} at row {}, column {}", k.name, t,
                           issuer, sb.name, dst, s.tensorMap, row0, col0);
      };
      if (s.multicast) {  // every block of the cluster must see the same copies: what it issues, what the others assumed
        auto [it, fresh] = multicastParts.try_emplace({&s, first, issuer - first, run}, MulticastPart{part});
        const std::array<int64_t, 4>& seen = it->second.copy;
        if (!fresh && seen != part)
          raise(fmt::format("{}: a multicast copy differs across the cluster (another block has it at [{}] <- row {}, column {}, "
                            "mbarrier [{}]): its operands must be the same in every block of the cluster but for blockIdx",
                            where(), seen[0], seen[2], seen[1], seen[3]));
        if (issuer == block) it->second.issued = true;
        if (part[3] != evaluate(s.b, env[t], &loader))
          raise(fmt::format("{}: completes on mbarrier [{}] in its issuer and [{}] here", where(), part[3], evaluate(s.b, env[t], &loader)));
      }
      if (dst % align != 0 || dst < 0 || dst + box > sb.elements)
        raise(fmt::format("{}: the destination must be a multiple of {} elements with the box's {} inside the buffer's {}", where(),
                          align, box, sb.elements));
      const PhaseTag tag{s.barriers, part[3], m.phase};
      for (int64_t r = 0; r < map.boxRows; ++r)
        for (int64_t c = 0; c < map.boxCols; ++c) {
          const int64_t row = row0 + r, col = col0 + c;
          const bool inside = row >= 0 && row < map.rows && col >= 0 && col < map.cols;
          const int64_t e = dst + r * map.boxCols + (map.swizzle128 ? (c / chunk ^ r % 8) * chunk + c % chunk : c);
          if (async && inFlight[s.target][e] >= 0)
            raise(fmt::format("{}: element {} is the destination of thread {}'s cp.async, not yet waited for", where(), e,
                              inFlight[s.target][e]));
          if (wgmmaUsed && pinned[s.target][e] > 0)
            raise(fmt::format("{}: element {} is read by a wgmma that has not been waited for", where(), e));
          shared[s.target][e] = inside ? src[static_cast<size_t>(map.offset + row * map.rowStride + col)] : 0.f;
          written[s.target][e] = 1;
          if (async) landed[s.target][e] = -1;
          if (wgmmaUsed) unfenced[s.target][e] = 0;  // written by the async proxy: wgmma needs no fence for it
          phaseTags[s.target][static_cast<size_t>(e)] = tag;
        }
      m.tx -= box * elemBytes;
    }
    completeIfDone(m);
  }
}

void Machine::finishCluster() {
  for (const auto& [key, part] : multicastParts)
    if (!part.issued)
      raise(fmt::format("kernel {}: block {} never issued its part of a multicast tma.load into shared {} (run {} of the statement; "
                        "its cluster's other blocks waited for it)",
                        k.name, std::get<1>(key) + std::get<2>(key), k.shared[std::get<0>(key)->target].name, std::get<3>(key)));
  multicastParts.clear();
}

}  // namespace kiln::kernel::interp
