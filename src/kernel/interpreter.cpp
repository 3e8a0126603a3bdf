// The Kernel-IR interpreter: runs each launch on the CPU block by block, all threads of a block in lockstep
// under an active mask (DESIGN.md §4). A statement completes for every active thread before the next one
// starts, so a barrier reached by the whole block is a no-op and one reached by part of it is an error.
// Shared memory is fresh per block and remembers which elements some thread wrote; reading any other
// element is an error. Outputs and temporaries start as NaN. The machine's state is in interpreter_machine.h;
// warp-collective statements and cp.async live in their own files.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "interpreter_machine.h"
#include "kiln/kernel/ir.h"
#include "kiln/support/error.h"

namespace kiln::kernel {
namespace interp {
namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

struct Dims {
  int maxVar = kBlockIdx;  // largest index variable id
  int maxSlot = -1;        // largest float slot
  int depth = 0;           // deepest For/If nesting
  bool async = false;      // has cp.async statements
  bool wgmma = false;      // has wgmma statements
  bool mbarrier = false;   // has mbarrier statements
};

void scanIdx(const Idx& e, Dims& d) {
  KILN_ASSERT(e != nullptr, "null index expression");
  forEachVar(e, [&](int v) {
    KILN_ASSERT(v >= 0, "negative index variable id {}", v);
    d.maxVar = std::max(d.maxVar, v);
  });
}

void scanExpr(const FE& e, Dims& d) {
  KILN_ASSERT(e != nullptr, "null float expression");
  if (e->kind == FExpr::Kind::Var) {
    KILN_ASSERT(e->var >= 0, "negative float slot {}", e->var);
    d.maxSlot = std::max(d.maxSlot, e->var);
  }
  if (e->kind == FExpr::Kind::Apply)
    KILN_ASSERT(static_cast<int>(e->args.size()) == tensor::arity(e->fn), "{} applied to {} operands", tensor::fnName(e->fn),
                e->args.size());
  if (e->index) scanIdx(e->index, d);
  if (e->bound) scanIdx(e->bound, d);
  for (auto& a : e->args) scanExpr(a, d);
}

void scanBlock(const Block& body, int depth, Dims& d) {
  d.depth = std::max(d.depth, depth);
  for (auto& s : body) {
    if (const int var = op::definedVar(s.op); var >= 0) {
      KILN_ASSERT(var > kBlockIdx, "index variable {} has a reserved id", var);
      d.maxVar = std::max(d.maxVar, var);
    }
    for (int slot : op::floatSlots(s.op)) {
      KILN_ASSERT(slot >= 0, "{} with negative float slot {}", s.kind == Stmt::Kind::ShuffleXor ? "shuffle" : "a statement", slot);
      d.maxSlot = std::max(d.maxSlot, slot);
    }
    for (const FE* v : op::floatValues(s.op)) scanExpr(*v, d);
    for (const Idx* e : op::indices(s.op)) scanIdx(*e, d);
    d.async = d.async || s.kind == Stmt::Kind::CpAsync;
    d.wgmma = d.wgmma || s.kind == Stmt::Kind::Wgmma;
    d.mbarrier = d.mbarrier || s.kind == Stmt::Kind::MbarrierInit;
    if (s.kind == Stmt::Kind::For || s.kind == Stmt::Kind::If) scanBlock(s.body, depth + 1, d);
  }
}

}  // namespace

float Machine::readShared(int buffer, int64_t i, int64_t t, const Idx& index) {
  const std::vector<float>& data = shared[buffer];
  if (i < 0 || i >= static_cast<int64_t>(data.size()))
    raise(fmt::format("kernel {}: thread {} of block {} loads shared {}[{}] out of bounds ({} elements; index {})", k.name, t,
                      block, k.shared[buffer].name, i, data.size(), toString(index)));
  checkSharedRead(buffer, i, t);
  if (!written[buffer][i])
    raise(fmt::format("kernel {}: thread {} reads shared {}[{}] that no thread wrote (block {}, index {})", k.name, t,
                      k.shared[buffer].name, i, block, toString(index)));
  return data[i];
}

float Machine::eval(const FExpr& e, int64_t t) {
  switch (e.kind) {
    case FExpr::Kind::Const: return e.value;
    case FExpr::Kind::Var: return floats[t * nf + e.var];
    case FExpr::Kind::LoadGlobal: {
      const std::vector<float>& data = paramData(e.param);
      int64_t i = evaluate(e.index, env[t], &loader);
      if (i < 0 || i >= static_cast<int64_t>(data.size()))
        raise(fmt::format("kernel {}: thread {} of block {} loads {}[{}] out of bounds ({} elements; index {})", k.name, t,
                          block, k.params[e.param].name, i, data.size(), toString(e.index)));
      countRead(e.param, 1);
      return data[i];
    }
    case FExpr::Kind::LoadShared: {
      KILN_ASSERT(e.shared >= 0 && e.shared < static_cast<int>(shared.size()), "kernel {}: shared buffer #{} of {}",
                  k.name, e.shared, shared.size());
      return readShared(e.shared, evaluate(e.index, env[t], &loader), t, e.index);
    }
    case FExpr::Kind::Apply: {
      float a = eval(*e.args[0], t);
      if (e.fn == Fn::Cast) return loop::roundTo(e.castTo, a);
      float b = e.args.size() > 1 ? eval(*e.args[1], t) : 0.f;
      float c = e.args.size() > 2 ? eval(*e.args[2], t) : 0.f;
      return tensor::applyFn(e.fn, a, b, c);
    }
    case FExpr::Kind::Select:
      return evaluate(e.index, env[t], &loader) < evaluate(e.bound, env[t], &loader) ? eval(*e.args[0], t)
                                                                                      : eval(*e.args[1], t);
  }
  return 0.f;
}

// The first element of a vector access by thread t: in bounds and a multiple of the width, as the hardware's
// aligned vector instructions require.
int64_t Machine::vectorStart(int param, const Idx& index, int64_t t, size_t width, const char* verb) {
  KILN_ASSERT(param >= 0 && param < static_cast<int>(k.params.size()), "kernel {}: vector access to parameter #{} of {}", k.name,
              param, k.params.size());
  const Param& prm = k.params[param];
  const int64_t n = static_cast<int64_t>(buffers[prm.buffer].size()), w = static_cast<int64_t>(width);
  int64_t i = evaluate(index, env[t], &loader);
  if (i < 0 || i + w > n)
    raise(fmt::format("kernel {}: thread {} of block {} {}{} {}[{}..{}] out of bounds ({} elements; index {})", k.name, t, block,
                      verb, width, prm.name, i, i + w - 1, n, toString(index)));
  if (i % w != 0)
    raise(fmt::format("kernel {}: thread {} of block {} {}{} {}[{}]: misaligned vector access (index not a multiple of {}; "
                      "index {})", k.name, t, block, verb, width, prm.name, i, width, toString(index)));
  return i;
}

// Index definitions, float assignments, loops and conditions (under the thread masks of `depth`). False where `s` is of another family.
bool Machine::execControl(const Stmt& s, int depth) {
  const std::vector<uint8_t>& mask = masks[depth];
  switch (s.kind) {
    case Stmt::Kind::DefIdx: {
      const auto& def = s.as<op::DefIdx>();
      for (int64_t t = 0; t < T; ++t)
        if (mask[t]) env[t][def.var] = evaluate(def.value, env[t], &loader);
      return true;
    }
    case Stmt::Kind::Assign: {
      const auto& set = s.as<op::Assign>();
      for (int64_t t = 0; t < T; ++t)
        if (mask[t]) floats[t * nf + set.slot] = eval(*set.value, t);
      return true;
    }
    case Stmt::Kind::For: {
      const auto& loop = s.as<op::For>();
      std::vector<int64_t>& end = ends[depth];
      std::vector<uint8_t>& inner = masks[depth + 1];
      for (int64_t t = 0; t < T; ++t)
        if (mask[t]) {
          env[t][loop.var] = evaluate(loop.begin, env[t], &loader);
          end[t] = evaluate(loop.end, env[t], &loader);
        }
      for (;;) {
        bool any = false;
        for (int64_t t = 0; t < T; ++t) {
          inner[t] = mask[t] && env[t][loop.var] < end[t];
          any = any || inner[t];
        }
        if (!any) break;
        exec(s.body, depth + 1);
        for (int64_t t = 0; t < T; ++t)
          if (inner[t]) env[t][loop.var] += loop.step;
      }
      return true;
    }
    case Stmt::Kind::If: {
      const auto& cond = s.as<op::If>();
      std::vector<uint8_t>& inner = masks[depth + 1];
      bool any = false;
      for (int64_t t = 0; t < T; ++t) {
        inner[t] = mask[t] && evaluate(cond.lhs, env[t], &loader) < evaluate(cond.rhs, env[t], &loader);
        any = any || inner[t];
      }
      if (any) exec(s.body, depth + 1);
      return true;
    }
    default: return false;
  }
  return true;
}

// Stores to global and shared memory, every active thread evaluating before any writes. False where `s` is of another family.
bool Machine::execMemory(const Stmt& s, int depth) {
  const std::vector<uint8_t>& mask = masks[depth];
  switch (s.kind) {
    case Stmt::Kind::StoreGlobal: {
      const auto& store = s.as<op::StoreGlobal>();
      KILN_ASSERT(store.param >= 0 && store.param < static_cast<int>(k.params.size()), "kernel {}: store to parameter #{} of {}",
                  k.name, store.param, k.params.size());
      const Param& prm = k.params[store.param];
      std::vector<float>& data = buffers[prm.buffer];
      DType dtype = p.buffers[prm.buffer].dtype;
      // Every active thread evaluates before any writes: the statement completes in lockstep.
      for (int64_t t = 0; t < T; ++t) {
        if (!mask[t]) continue;
        int64_t i = evaluate(store.index, env[t], &loader);
        if (i < 0 || i >= static_cast<int64_t>(data.size()))
          raise(fmt::format("kernel {}: thread {} of block {} stores {}[{}] out of bounds ({} elements; index {})", k.name,
                            t, block, prm.name, i, data.size(), toString(store.index)));
        idxTmp[t] = i;
        valTmp[t] = loop::roundTo(dtype, eval(*store.value, t));
      }
      for (int64_t t = 0; t < T; ++t)
        if (mask[t]) data[idxTmp[t]] = valTmp[t];
      return true;
    }
    case Stmt::Kind::StoreShared: {
      const auto& store = s.as<op::StoreShared>();
      KILN_ASSERT(store.shared >= 0 && store.shared < static_cast<int>(shared.size()), "kernel {}: shared buffer #{} of {}",
                  k.name, store.shared, shared.size());
      std::vector<float>& data = shared[store.shared];
      for (int64_t t = 0; t < T; ++t) {
        if (!mask[t]) continue;
        int64_t i = evaluate(store.index, env[t], &loader);
        if (i < 0 || i >= static_cast<int64_t>(data.size()))
          raise(fmt::format("kernel {}: thread {} of block {} stores shared {}[{}] out of bounds ({} elements; index {})",
                            k.name, t, block, k.shared[store.shared].name, i, data.size(), toString(store.index)));
        idxTmp[t] = i;
        valTmp[t] = loop::roundTo(k.shared[store.shared].dtype, eval(*store.value, t));  // f32 buffers: unchanged
      }
      for (int64_t t = 0; t < T; ++t)
        if (mask[t]) {
          checkSharedWrite(store.shared, idxTmp[t], t);
          data[idxTmp[t]] = valTmp[t];
          written[store.shared][idxTmp[t]] = 1;
        }
      return true;
    }
    default: return false;
  }
  return true;
}

// Barriers, block tickets and the counters blocks hand work over by. False where `s` is of another family.
bool Machine::execSynchronization(const Stmt& s, int depth) {
  const std::vector<uint8_t>& mask = masks[depth];
  switch (s.kind) {
    case Stmt::Kind::BlockTicket: {  // a barrier, then one ticket for the block (blocks run one after another here)
      int64_t n = std::count(mask.begin(), mask.begin() + T, uint8_t{1});
      if (n != T)
        raise(fmt::format("kernel {}: ticket {} taken by {} of {} threads (under divergent control flow; block {})", k.name,
                          s.as<op::BlockTicket>().name, n, T, block));
      barrierStep();
      const auto& ticket = s.as<op::BlockTicket>();
      const Param& prm = k.params[ticket.counter.param];
      std::vector<float>& counters = buffers[prm.buffer];
      const int64_t i = evaluate(ticket.counter.index, env[0], &loader);
      if (i < 0 || i >= static_cast<int64_t>(counters.size()))
        raise(fmt::format("kernel {}: block {} takes ticket {}[{}] out of bounds ({} counters)", k.name, block, prm.name, i,
                          counters.size()));
      const auto before = static_cast<int64_t>(counters[static_cast<size_t>(i)]);
      if (before < 0 || before >= ticket.blocks)
        raise(fmt::format("kernel {}: counter {}[{}] holds {} at block {}'s ticket (want 0 .. {}: counters start at zero)",
                          k.name, prm.name, i, before, block, ticket.blocks - 1));
      counters[static_cast<size_t>(i)] = static_cast<float>(before + 1 == ticket.blocks ? 0 : before + 1);
      for (int64_t t = 0; t < T; ++t) env[t][ticket.var] = before;
      return true;
    }
    case Stmt::Kind::Barrier:
    case Stmt::Kind::ClusterBarrier: {  // the cluster's other blocks run the same code (see tmaLoadMulticast)
      int64_t n = std::count(mask.begin(), mask.begin() + T, uint8_t{1});
      if (n != T)
        raise(fmt::format("kernel {}: barrier reached by {} of {} threads (barrier under divergent control flow; block {})",
                          k.name, n, T, block));
      barrierStep();
      return true;
    }
    case Stmt::Kind::NamedBarrier: {
      int64_t n = 0;
      for (int64_t w = 0; w * 32 < T; ++w) n += warpActive(w, mask, "a named barrier");
      if (const auto& bar = s.as<op::NamedBarrier>(); n != bar.threads)
        raise(fmt::format("kernel {}: barrier {} of {} threads reached by {} (block {})", k.name, bar.id, bar.threads, n, block));
      barrierStep();
      return true;
    }
    case Stmt::Kind::CounterRelease:
    case Stmt::Kind::CounterAwait: {  // per thread that reaches it (blocks run one after another here)
      const bool release = s.kind == Stmt::Kind::CounterRelease;
      const op::Counter& counter = release ? s.as<op::CounterRelease>().counter : s.as<op::CounterAwait>().counter;
      const Param& prm = k.params[counter.param];
      std::vector<float>& counters = buffers[prm.buffer];
      for (int64_t t = 0; t < T; ++t) {
        if (!mask[t]) continue;
        const int64_t i = evaluate(counter.index, env[t], &loader);
        if (i < 0 || i >= static_cast<int64_t>(counters.size()))
          raise(fmt::format("kernel {}: block {} thread {} reaches counter {}[{}] out of bounds ({} counters)", k.name, block, t,
                            prm.name, i, counters.size()));
        float& c = counters[static_cast<size_t>(i)];
        if (release) {
          c += 1.f;
          continue;
        }
        const int64_t want = evaluate(s.as<op::CounterAwait>().count, env[t], &loader);
        if (static_cast<int64_t>(c) != want)
          raise(fmt::format("kernel {}: block {} thread {} waits for counter {}[{}] to hold {}, and it holds {}: the blocks it "
                            "waits for must come earlier in grid order (the interpreter runs blocks one after another)",
                            k.name, block, t, prm.name, i, want, static_cast<int64_t>(c)));
        c = 0.f;
      }
      return true;
    }
    default: return false;
  }
  return true;
}

// cp.async groups, mbarriers, TMA loads and the async-proxy fences. False where `s` is of another family.
bool Machine::execAsyncCopy(const Stmt& s, int depth) {
  const std::vector<uint8_t>& mask = masks[depth];
  switch (s.kind) {
    case Stmt::Kind::CpAsync: cpAsyncStep(s, mask); return true;
    case Stmt::Kind::CpAsyncCommit: cpAsyncCommitStep(mask); return true;
    case Stmt::Kind::CpAsyncWait: cpAsyncWaitStep(s, mask); return true;
    case Stmt::Kind::MbarrierInit:
    case Stmt::Kind::MbarrierArrive:
    case Stmt::Kind::MbarrierArriveCluster:
    case Stmt::Kind::CpAsyncMbarrierArrive:
    case Stmt::Kind::MbarrierWait:
    case Stmt::Kind::MbarrierExpectTx:
    case Stmt::Kind::TmaLoad:
      if (!mbarrierUsed) raise(fmt::format("kernel {}: an mbarrier statement, but no barrier is ever initialised", k.name));
      if (s.kind == Stmt::Kind::TmaLoad) tmaLoadStep(s, op::isElected(s.op) ? electedLanes(mask, s) : mask);
      else mbarrierStep(s, op::isElected(s.op) ? electedLanes(mask, s) : mask);
      return true;
    case Stmt::Kind::FenceProxyAsync: fenceProxyAsyncStep(mask); return true;
    case Stmt::Kind::FenceMbarrierInit: return true;  // the interpreter's inits are visible at once
    default: return false;
  }
  return true;
}

// Vector loads and stores, shuffles, pairs, ldmatrix, mma and wgmma. False where `s` is of another family.
bool Machine::execRegisters(const Stmt& s, int depth) {
  const std::vector<uint8_t>& mask = masks[depth];
  switch (s.kind) {
    case Stmt::Kind::Mma: mmaStep(s, mask); return true;
    case Stmt::Kind::ShuffleXor: shuffleStep(s, mask); return true;
    case Stmt::Kind::PackPair: {
      const auto& pack = s.as<op::PackPair>();
      for (int64_t t = 0; t < T; ++t)
        if (mask[t])
          for (int e = 0; e < 2; ++e)
            pairValues[(static_cast<size_t>(t) * static_cast<size_t>(np) + static_cast<size_t>(pack.reg)) * 2 + e] =
                loop::roundTo(pack.type, floats[t * nf + (e == 0 ? pack.lo : pack.hi)]);
      return true;
    }
    case Stmt::Kind::Ldmatrix: ldmatrixStep(s, mask); return true;
    case Stmt::Kind::LoadSharedVector: {
      const auto& load = s.as<op::LoadSharedVector>();
      for (int64_t t = 0; t < T; ++t) {
        if (!mask[t]) continue;
        const int64_t i = evaluate(load.index, env[t], &loader), w = static_cast<int64_t>(load.slots.size());
        if (i % w != 0)
          raise(fmt::format("kernel {}: thread {} of block {} loads a vector of {} from shared {}[{}], not aligned (index {})",
                            k.name, t, block, w, k.shared[load.shared].name, i, toString(load.index)));
        for (int64_t e = 0; e < w; ++e)
          floats[t * nf + load.slots[static_cast<size_t>(e)]] = readShared(load.shared, i + e, t, load.index);
      }
      return true;
    }
    case Stmt::Kind::LoadVector: {
      const auto& load = s.as<op::LoadVector>();
      for (int64_t t = 0; t < T; ++t) {
        if (!mask[t]) continue;
        int64_t i = vectorStart(load.param, load.index, t, load.slots.size(), "loads vector");
        const std::vector<float>& data = buffers[k.params[load.param].buffer];
        countRead(load.param, static_cast<int64_t>(load.slots.size()));
        for (size_t e = 0; e < load.slots.size(); ++e) floats[t * nf + load.slots[e]] = data[i + static_cast<int64_t>(e)];
      }
      return true;
    }
    case Stmt::Kind::StoreVector: {
      const auto& store = s.as<op::StoreVector>();
      const size_t w = store.values.size();
      std::vector<float> vals(static_cast<size_t>(T) * w);
      for (int64_t t = 0; t < T; ++t) {
        if (!mask[t]) continue;
        idxTmp[t] = vectorStart(store.param, store.index, t, w, "stores vector");
        DType dtype = p.buffers[k.params[store.param].buffer].dtype;
        for (size_t e = 0; e < w; ++e) vals[t * w + e] = loop::roundTo(dtype, eval(*store.values[e], t));
      }
      std::vector<float>& data = buffers[k.params[store.param].buffer];
      for (int64_t t = 0; t < T; ++t)
        if (mask[t])
          for (size_t e = 0; e < w; ++e) data[idxTmp[t] + static_cast<int64_t>(e)] = vals[t * w + e];
      return true;
    }
    case Stmt::Kind::Wgmma: wgmmaStep(s, mask); return true;
    case Stmt::Kind::WgmmaFence: activeWarpgroups(mask, "wgmma.fence"); return true;
    case Stmt::Kind::WgmmaCommit: wgmmaCommitStep(mask); return true;
    case Stmt::Kind::WgmmaWait: wgmmaWaitStep(s, mask); return true;
    default: return false;
  }
  return true;
}

void Machine::exec(const Block& body, int depth) {
  for (const Stmt& s : body)  // one family each
    if (!execControl(s, depth) && !execMemory(s, depth) && !execSynchronization(s, depth) && !execAsyncCopy(s, depth))
      execRegisters(s, depth);
}

void Machine::run() {
  KILN_ASSERT(k.grid[1] == 1 && k.grid[2] == 1 && k.block[1] == 1 && k.block[2] == 1,
              "kernel {}: the interpreter runs one-dimensional launches only (grid ({},{},{}) block ({},{},{}))", k.name,
              k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2]);
  KILN_ASSERT(k.grid[0] >= 1 && k.block[0] >= 1, "kernel {}: empty launch grid {} block {}", k.name, k.grid[0], k.block[0]);
  for (auto& prm : k.params)
    KILN_ASSERT(prm.buffer >= 0 && prm.buffer < static_cast<int>(p.buffers.size()), "kernel {}: parameter {} names buffer #{}",
                k.name, prm.name, prm.buffer);
  for (auto& sb : k.shared)
    KILN_ASSERT(sb.elements >= 0, "kernel {}: shared buffer {} has {} elements", k.name, sb.name, sb.elements);
  Dims d;
  try {
    scanBlock(k.body, 0, d);
  } catch (const InternalError& e) {
    raise(fmt::format("kernel {}: {}", k.name, e.what()));
  }
  KILN_ASSERT(d.maxSlot < static_cast<int>(k.floatVars.size()), "kernel {}: float slot {} used but {} declared", k.name,
              d.maxSlot, k.floatVars.size());
  T = k.block[0];
  async = d.async;
  wgmmaUsed = d.wgmma;
  mbarrierUsed = d.mbarrier;
  nf = static_cast<int>(k.floatVars.size());
  env.assign(T, std::vector<int64_t>(d.maxVar + 1, 0));
  floats.assign(T * nf, kPoison);
  np = static_cast<int>(k.pairVars.size());
  pairValues.assign(T * np * 2, kPoison);
  masks.assign(d.depth + 1, std::vector<uint8_t>(T, 0));
  ends.assign(d.depth + 1, std::vector<int64_t>(T, 0));
  idxTmp.assign(T, 0);
  valTmp.assign(T, 0.f);
  shared.resize(k.shared.size());
  written.resize(k.shared.size());
  std::fill(masks[0].begin(), masks[0].end(), uint8_t{1});
  for (block = 0; block < k.grid[0]; ++block) {
    for (size_t i = 0; i < k.shared.size(); ++i) {
      shared[i].assign(k.shared[i].elements, kPoison);
      written[i].assign(k.shared[i].elements, 0);
    }
    std::fill(floats.begin(), floats.end(), kPoison);
    if (async) resetAsync();
    if (wgmmaUsed) resetWgmma();
    if (mbarrierUsed) resetMbarriers();
    for (int64_t t = 0; t < T; ++t) {
      env[t][kThreadIdx] = t;
      env[t][kBlockIdx] = block;
    }
    exec(k.body, 0);
    if (mbarrierUsed && (block + 1) % k.cluster == 0) finishCluster();
  }
}

}  // namespace interp

std::vector<HostTensor> interpret(const Program& p, const std::vector<HostTensor>& inputs, InterpretCounts* counts,
                                  const AfterKernel& afterKernel) {
  KILN_ASSERT(inputs.size() == p.inputs.size(), "kernel IR interpreter: {} inputs given for {} model inputs", inputs.size(),
              p.inputs.size());
  std::vector<std::vector<float>> buffers(p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const loop::Buffer& info = p.buffers[b];
    if (info.kind == loop::Buffer::Kind::Weight) {
      KILN_ASSERT(info.weight && static_cast<int64_t>(info.weight->values.size()) == numel(info.shape),
                  "kernel IR interpreter: weight buffer {} has no data or the wrong number of values", info.name);
      buffers[b] = info.weight->values;
      for (float& v : buffers[b]) v = loop::roundTo(info.dtype, v);  // as uploaded in the buffer's dtype
    } else {  // counters start at zero, as the runtime's arena does; the rest poisoned
      buffers[b].assign(numel(info.shape), info.kind == loop::Buffer::Kind::Counters ? 0.f : interp::kPoison);
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    int b = p.inputs[i];
    KILN_ASSERT(b >= 0 && b < static_cast<int>(p.buffers.size()), "kernel IR interpreter: input #{} names buffer #{}", i, b);
    const loop::Buffer& info = p.buffers[b];
    if (static_cast<int64_t>(inputs[i].values.size()) != numel(info.shape))
      userError("input {} ({}) has {} elements, expected {} (shape {})", i, info.name, inputs[i].values.size(),
                numel(info.shape), shapeString(info.shape));
    buffers[b] = inputs[i].values;
    for (float& v : buffers[b]) v = loop::roundTo(info.dtype, v);
  }
  for (auto [output, input] : p.inPlace)  // one set of bytes on the GPU: the output starts as the input
    buffers[static_cast<size_t>(output)] = buffers[static_cast<size_t>(input)];
  if (counts) counts->elementsRead.assign(p.kernels.size(), std::vector<int64_t>(p.buffers.size(), 0));
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    interp::Machine machine(p, p.kernels[i], buffers);
    if (counts) machine.elementsRead = &counts->elementsRead[i];
    machine.run();
    if (afterKernel) afterKernel(i, buffers);
  }
  std::vector<HostTensor> out;
  for (int b : p.outputs) {
    KILN_ASSERT(b >= 0 && b < static_cast<int>(p.buffers.size()), "kernel IR interpreter: output buffer #{}", b);
    out.push_back(HostTensor{p.buffers[b].dtype, p.buffers[b].shape, buffers[b]});
  }
  return out;
}

}  // namespace kiln::kernel
