// The Kernel-IR interpreter's mbarriers (interpreter_machine.h; the rules are in kiln/kernel/ir.h at mbarrierInit).
// Threads run in lockstep, so a wait is answered from what program order has done so far: the phase it waits for
// has completed or it would wait forever. Copies that arrive on a barrier (cpAsyncMbarrierArrive) land at the
// arrival, tagged with the barrier's phase; a thread may read them once it has waited for that phase (or after a
// block barrier that follows the phase's completion).
#include <fmt/format.h>

#include "interpreter_machine.h"

namespace kiln::kernel::interp {

void Machine::resetMbarriers() {
  mbarriers.assign(k.shared.size(), {});
  phaseTags.assign(k.shared.size(), {});
  clusterRuns.clear();  // per block; clusterParts outlives it (the cluster's blocks compare their statements)
  for (size_t b = 0; b < k.shared.size(); ++b) {
    if (k.shared[b].mbarriers) mbarriers[b].assign(static_cast<size_t>(k.shared[b].elements), Mbarrier{});
    else phaseTags[b].assign(static_cast<size_t>(k.shared[b].elements), PhaseTag{});
  }
}

Machine::Mbarrier& Machine::mbarrierOf(const Stmt& s, int64_t t, const char* what) {
  const op::Mbarrier* barrier = op::mbarrierOf(s.op);
  KILN_ASSERT(barrier, "kernel {}: {} names no mbarrier", k.name, what);
  const int buffer = barrier->buffer;
  KILN_ASSERT(buffer >= 0 && buffer < static_cast<int>(k.shared.size()) && k.shared[buffer].mbarriers,
              "kernel {}: {} on shared buffer #{}, which holds no mbarriers", k.name, what, buffer);
  const int64_t i = evaluate(barrier->index, env[t], &loader);
  const SharedBuffer& sb = k.shared[buffer];
  if (i < 0 || i >= sb.elements)
    raise(fmt::format("kernel {}: thread {} of block {}: {} {}[{}] out of bounds ({} mbarriers)", k.name, t, block, what, sb.name, i,
                      sb.elements));
  Mbarrier& m = mbarriers[buffer][static_cast<size_t>(i)];
  if (s.kind == Stmt::Kind::MbarrierInit) return m;
  if (m.arrivals == 0)
    raise(fmt::format("kernel {}: thread {} of block {}: {} of mbarrier {}[{}], which no thread initialised", k.name, t, block, what,
                      sb.name, i));
  if (m.initBy >= 0 && m.initBy != t)
    raise(fmt::format("kernel {}: thread {} of block {}: {} of mbarrier {}[{}] before a block barrier published thread {}'s "
                      "initialisation", k.name, t, block, what, sb.name, i, m.initBy));
  return m;
}

void Machine::arrive(Mbarrier& m) {
  --m.pending;
  completeIfDone(m);
}

void Machine::completeIfDone(Mbarrier& m) {
  if (m.pending > 0 || m.tx != 0) return;
  ++m.phase;
  m.pending = m.arrivals;
}

void Machine::mbarrierStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  for (int64_t t = 0; t < T; ++t) {
    if (!mask[t]) continue;
    switch (s.kind) {
      case Stmt::Kind::MbarrierInit: {
        Mbarrier& m = mbarrierOf(s, t, "mbarrier.init");
        const auto& init = s.as<op::MbarrierInit>();
        if (m.arrivals != 0)
          raise(fmt::format("kernel {}: thread {} of block {} initialises mbarrier {}[{}] a second time (one thread "
                            "initialises each barrier, once)", k.name, t, block, k.shared[init.barrier.buffer].name,
                            evaluate(init.barrier.index, env[t], &loader)));
        m = Mbarrier{init.arrivals, init.arrivals, 0, 0, static_cast<int32_t>(t), std::vector<int64_t>(static_cast<size_t>(T), 0)};
        break;
      }
      case Stmt::Kind::MbarrierArrive: arrive(mbarrierOf(s, t, "mbarrier.arrive")); break;
      case Stmt::Kind::MbarrierArriveCluster: {  // every block of the cluster arrives on this one's at this point
        Mbarrier& m = mbarrierOf(s, t, "mbarrier.arrive (cluster)");
        for (size_t i = 0, n = clusterIssuers(s, t).size(); i < n; ++i) arrive(m);
        break;
      }
      case Stmt::Kind::MbarrierExpectTx: {
        Mbarrier& m = mbarrierOf(s, t, "mbarrier.arrive.expect_tx");
        m.tx += s.as<op::MbarrierExpectTx>().bytes;
        arrive(m);
        break;
      }
      case Stmt::Kind::CpAsyncMbarrierArrive: {
        Mbarrier& m = mbarrierOf(s, t, "cp.async.mbarrier.arrive");
        const op::Mbarrier& barrier = s.as<op::CpAsyncMbarrierArrive>().barrier;
        const PhaseTag tag{barrier.buffer, evaluate(barrier.index, env[t], &loader), m.phase};
        if (async) {
          for (const auto& group : committed[t])
            for (const Copy& c : group) landCopy(c, t, -1, &tag);
          for (const Copy& c : openGroup[t]) landCopy(c, t, -1, &tag);
          committed[t].clear();
          openGroup[t].clear();
        }
        arrive(m);
        break;
      }
      case Stmt::Kind::MbarrierWait: {
        Mbarrier& m = mbarrierOf(s, t, "mbarrier.wait");
        const auto& wait = s.as<op::MbarrierWait>();
        const int64_t parity = evaluate(wait.parity, env[t], &loader);
        if (parity != 0 && parity != 1)
          raise(fmt::format("kernel {}: thread {} of block {}: mbarrier.wait for parity {}", k.name, t, block, parity));
        if (m.phase % 2 == parity)  // the phase of that parity is the one in progress
          raise(fmt::format("kernel {}: thread {} of block {} waits for the phase of parity {} of mbarrier {}[{}], which has not "
                            "completed: its {} remaining arrival(s) come later in program order or never (it would wait forever)",
                            k.name, t, block, parity, k.shared[wait.barrier.buffer].name, evaluate(wait.barrier.index, env[t], &loader),
                            m.pending));
        m.seen[static_cast<size_t>(t)] = m.phase;
        break;
      }
      default: KILN_ASSERT(false, "kernel {}: mbarrierStep on another statement", k.name);
    }
  }
}

void Machine::checkPhaseTag(int buffer, int64_t i, int64_t t) {
  const PhaseTag& tag = phaseTags[buffer][static_cast<size_t>(i)];
  if (tag.barriers < 0) return;
  const Mbarrier& m = mbarriers[tag.barriers][static_cast<size_t>(tag.index)];
  if (m.phase > tag.phase && m.seen[static_cast<size_t>(t)] > tag.phase) return;
  raise(fmt::format("kernel {}: thread {} of block {} reads shared {}[{}], whose cp.async arrives on phase {} of mbarrier {}[{}], "
                    "which it has not waited for{}", k.name, t, block, k.shared[buffer].name, i, tag.phase,
                    k.shared[tag.barriers].name, tag.index, m.phase > tag.phase ? "" : " (the phase has not completed)"));
}

void Machine::publishMbarriers() {
  for (size_t b = 0; b < mbarriers.size(); ++b)
    for (Mbarrier& m : mbarriers[b]) m.initBy = -1;
  for (auto& tags : phaseTags)
    for (PhaseTag& tag : tags)
      if (tag.barriers >= 0 && mbarriers[tag.barriers][static_cast<size_t>(tag.index)].phase > tag.phase) tag = PhaseTag{};
}

}  // namespace kiln::kernel::interp
