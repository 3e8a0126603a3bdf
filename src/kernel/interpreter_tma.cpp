// The Kernel-IR interpreter's TMA tensor copies (interpreter_machine.h; the rules are in kiln/kernel/ir.h at tmaLoad).
// The box lands when the copy is issued (threads run in lockstep, so every later statement comes after it), each element
// tagged with the phase of its mbarrier in progress: a thread may read it once it has waited for that phase
// (checkPhaseTag). The bytes then count against the phase's transaction count, which an arrive.expect_tx raised.
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
  for (int64_t t = 0; t < T; ++t) {
    if (!mask[t]) continue;
    Mbarrier& m = mbarrierOf(s, t, "tma.load");  // the barrier the bytes complete on
    const int64_t dst = evaluate(s.a, env[t], &loader), col0 = evaluate(s.coords[0], env[t], &loader),
                  row0 = evaluate(s.coords[1], env[t], &loader);
    auto where = [&] {
      return fmt::format("kernel {}: thread {} of block {}: tma.load shared {}[{}] <- tensor map {} at row {}, column {}", k.name, t,
                         block, sb.name, dst, s.tensorMap, row0, col0);
    };
    if (dst % align != 0 || dst < 0 || dst + box > sb.elements)
      raise(fmt::format("{}: the destination must be a multiple of {} elements with the box's {} inside the buffer's {}", where(), align,
                        box, sb.elements));
    const PhaseTag tag{s.barriers, evaluate(s.b, env[t], &loader), m.phase};
    for (int64_t r = 0; r < map.boxRows; ++r)
      for (int64_t c = 0; c < map.boxCols; ++c) {
        const int64_t row = row0 + r, col = col0 + c;
        const bool inside = row >= 0 && row < map.rows && col >= 0 && col < map.cols;
        const int64_t at = map.swizzle128 ? (c / chunk ^ r % 8) * chunk + c % chunk : c;
        const int64_t e = dst + r * map.boxCols + at;
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
    completeIfDone(m);
  }
}

}  // namespace kiln::kernel::interp
