// Kernel IR verifier: the static hardware rules (include/kiln/kernel/ir.h).
//  * launch dimensions within CUDA's limits; static shared memory within the target's 48 KiB, static + dynamic
//    within its per-block maximum (227 KiB on sm_90), the dynamic buffers' layout within dynamicSharedBytes;
//  * every parameter names an existing program buffer with its dtype and size; every load/store names an
//    existing parameter or shared buffer; stores go only to parameters marked written;
//  * every index variable is defined before use and only used inside the block that defines it (a DefIdx
//    is a block-scoped `const` in the emitted CUDA; a For variable lives in its body); variable ids are not
//    redefined while in scope (the interpreter keeps one flat environment per thread); every float slot is
//    assigned somewhere earlier in program order before it is read;
//  * no barrier under control flow that depends on the thread (threadIdx.x, or any index variable derived
//    from it): such a barrier is reached by only part of the block; a named barrier only where exactly the warps it
//    names pass the conditions around it (verifier_roles.cpp);
//  * shared-memory indices within bounds wherever interval arithmetic can bound them, using the launch
//    extents, For bounds and the guards of enclosing ifs;
//  * an mma reading pairs from shared memory: buffers of its operand type, pair indices provably even;
//  * vector loads and stores: 4 to 16 bytes of f32/bf16/f16, the index provably a multiple of the width (with
//    DefIdx and loop variables expanded), within the parameter where interval arithmetic bounds it;
//  * warp-collective statements (mma, shuffles) only under block-uniform control flow, in whole warps;
//  * mbarriers: per-thread statements (allowed under thread-dependent control flow, unlike block barriers) on a
//    buffer of mbarriers that nothing else touches; the arrival count and wait parity in range; TMA tensor maps,
//    copies and clusters as verifier_tma.cpp checks them, their shared destinations in bounds and provably aligned;
//  * cp.async: on targets that have it, same dtype both sides, both indices provably aligned to the copy size,
//    in bounds where known. (Whether every read waits for its copy is checked by the interpreter, not here.)
// The interval arithmetic behind the bounds is in verifier_ranges.cpp; the walk's state and its checks are declared in
// verifier_state.h, those of the asynchronous copies and tensor cores defined in verifier_async.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "kiln/kernel/ir.h"
#include "kiln/support/error.h"
#include "verifier_ranges.h"
#include "verifier_roles.h"
#include "verifier_state.h"
#include "verifier_tma.h"

namespace kiln::kernel {
namespace detail {

void Verifier::checkPairRegs(const std::vector<int>& regs, bool write, const char* what) {
  for (int r : regs) {
    if (r < 0 || r >= static_cast<int>(k.pairVars.size())) fail("{} pair register {} of {}", what, r, k.pairVars.size());
    if (write) pairAssigned[r] = true;
    else if (!pairAssigned[r]) fail("{} reads pair register ${} before any load", what, k.pairVars[r]);
  }
}

void Verifier::checkIdx(const Idx& e, const Scope& s, const char* what) {
  if (!e) fail("null index expression in {}", what);
  forEachVar(e, [&](int v) {
    if (v == kThreadIdx || v == kBlockIdx) return;
    if (!s.defined.count(v)) fail("index variable #{} used in {} ({}) before its definition or outside its scope", v, what, toString(e));
  });
}

bool Verifier::varies(const Idx& e, const Scope& s) {
  bool r = false;
  forEachVar(e, [&](int v) { r = r || v == kThreadIdx || s.varying.count(v); });
  return r;
}

std::optional<Range> Verifier::bound(const Idx& e, const Scope& s) {
  return intersect(interval(e, s.ranges, nullptr), interval(e, s.ranges, &s.defs));
}

Idx Verifier::expand(const Idx& e, const Scope& s) {
  return substitute(e, [&](int v, const std::string&) -> Idx {
    auto it = s.expanded.find(v);
    return it == s.expanded.end() ? nullptr : it->second;
  });
}

void Verifier::checkVectorAccess(int param, const Idx& index, size_t width, const Scope& s, const char* what) {
  if (param < 0 || param >= static_cast<int>(k.params.size())) fail("{} of parameter #{} of {}", what, param, k.params.size());
  const Param& prm = k.params[param];
  const int64_t bytes = static_cast<int64_t>(width) * dtypeBytes(prm.dtype);
  if (width < 2 || (width & (width - 1)) != 0 || bytes < 4 || bytes > 16 ||
      (prm.dtype != DType::F32 && prm.dtype != DType::BF16 && prm.dtype != DType::F16))
    fail("{}{} of {} {}: vectors are 2, 4 or 8 elements of f32, bf16 or f16 in 4 to 16 bytes", what, width,
         dtypeName(prm.dtype), prm.name);
  VarExtents extents{{kThreadIdx, k.block[0]}, {kBlockIdx, k.grid[0]}};
  if (!provablyMultipleOf(expand(index, s), static_cast<int64_t>(width), extents))
    fail("vector access not provably aligned: {}{} {}[{}] needs an index that is a multiple of {} (expanded: {})", what,
         width, prm.name, toString(index), width, toString(expand(index, s)));
  if (!s.reachable) return;
  if (auto r = bound(index, s); r && (r->first < 0 || r->second + static_cast<int64_t>(width) > prm.elements))
    fail("{}{} {}[{}] reaches elements [{}, {}], outside the parameter's {} elements", what, width, prm.name, toString(index),
         r->first, r->second + static_cast<int64_t>(width) - 1, prm.elements);
}

void Verifier::checkWarpCollective(const char* what, int64_t granule, bool trailing) {
  if (divergence.empty()) {
    if (k.block[0] % granule != 0 && !(trailing && k.block[0] % Target::kWarpSize == 0)) fail("{} in a block of {} threads (not whole {}s of {})", what, k.block[0],
                                        granule == Target::kWarpSize ? "warp" : "warpgroup", granule);
    return;
  }
  if (divergentLoop) fail("{} in a loop whose bounds depend on the thread (`{}`)", what, divergence);
  if (std::string why = detail::checkWholeGroups(roleConditions, k.block[0] * k.block[1] * k.block[2], granule, trailing); !why.empty())
    fail("{} under thread-dependent control flow `{}`: {}", what, divergence, why);
}

void Verifier::checkSlotRead(int slot, const char* what) {
  if (slot < 0 || slot >= static_cast<int>(k.floatVars.size()))
    fail("{} float slot {} out of range ({} float variables)", what, slot, k.floatVars.size());
  if (!assigned[slot]) fail("{} reads float variable %{} before any assignment", what, k.floatVars[slot]);
}

void Verifier::checkSlotWrite(int slot, const char* what) {
  if (slot < 0 || slot >= static_cast<int>(k.floatVars.size()))
    fail("{} writes float slot {} of {}", what, slot, k.floatVars.size());
  assigned[slot] = true;
}

void Verifier::checkSharedIndex(int buffer, const Idx& index, const Scope& s, const char* what) {
  if (buffer < 0 || buffer >= static_cast<int>(k.shared.size()))
    fail("{} names shared buffer #{} of {}", what, buffer, k.shared.size());
  const SharedBuffer& sb = k.shared[buffer];
  if (sb.mbarriers != (std::string_view(what) == "mbarrier"))
    fail("{} of shared {}: {}", what, sb.name, sb.mbarriers ? "mbarriers are touched only by mbarrier statements" : "not mbarriers");
  if (!s.reachable) return;
  if (auto r = bound(index, s); r && (r->first < 0 || r->second >= sb.elements))
    fail("{} shared {}[{}] indexes [{}, {}], outside the buffer's {} elements", what, sb.name, toString(index), r->first,
         r->second, sb.elements);
}

void Verifier::checkExpr(const FE& e, const Scope& s) {
  if (!e) fail("null float expression");
  switch (e->kind) {
    case FExpr::Kind::Const: return;
    case FExpr::Kind::Var:
      if (e->var < 0 || e->var >= static_cast<int>(k.floatVars.size()))
        fail("float slot {} out of range ({} float variables)", e->var, k.floatVars.size());
      if (!assigned[e->var]) fail("float variable %{} read before any assignment", k.floatVars[e->var]);
      return;
    case FExpr::Kind::LoadGlobal:
      if (e->param < 0 || e->param >= static_cast<int>(k.params.size()))
        fail("load of parameter #{} of {}", e->param, k.params.size());
      checkIdx(e->index, s, "a global load");
      return;
    case FExpr::Kind::LoadShared:
      checkIdx(e->index, s, "a shared load");
      checkSharedIndex(e->shared, e->index, s, "load");
      return;
    case FExpr::Kind::Select:
      checkIdx(e->index, s, "a select condition");
      checkIdx(e->bound, s, "a select condition");
      for (auto& a : e->args) checkExpr(a, s);
      return;
    case FExpr::Kind::Apply:
      if (static_cast<int>(e->args.size()) != tensor::arity(e->fn))
        fail("{} applied to {} operands", tensor::fnName(e->fn), e->args.size());
      for (auto& a : e->args) checkExpr(a, s);
      return;
  }
}

void Verifier::defineVar(int var, const std::string& name, Scope& s) {
  if (var == kThreadIdx || var == kBlockIdx || var < 0) fail("variable {} uses reserved or negative id {}", name, var);
  if (s.defined.count(var)) fail("variable {} (#{}) redefined while an earlier definition is in scope", name, var);
  s.defined.insert(var);
}

// Index definitions (which define variables in `s` for the statements after), float assignments, loops
// and conditions. False where `st` is of another family.
bool Verifier::checkControl(const Stmt& st, Scope& s) {
  switch (st.kind) {
    case Stmt::Kind::DefIdx: {
      const auto& def = st.as<op::DefIdx>();
      checkIdx(def.value, s, "a definition");
      if (def.warpUniform)
        if (std::string why = detail::checkWarpUniform(expand(def.value, s), k.block[0]); !why.empty())
          fail("warp-uniform {} = {}: {}", def.name, toString(def.value), why);
      defineVar(def.var, def.name, s);
      if (varies(def.value, s)) s.varying.insert(def.var);
      if (auto r = intersect(bound(def.value, s), enumeratedBound(def.value, s.ranges))) s.ranges[def.var] = *r;
      s.defs[def.var] = def.value;
      s.expanded[def.var] = expand(def.value, s);
      return true;
    }
    case Stmt::Kind::Assign: {
      const auto& set = st.as<op::Assign>();
      checkExpr(set.value, s);
      if (set.slot < 0 || set.slot >= static_cast<int>(k.floatVars.size()))
        fail("assignment to float slot {} of {}", set.slot, k.floatVars.size());
      assigned[set.slot] = true;
      return true;
    }
    case Stmt::Kind::For: checkLoop(st, s); return true;
    case Stmt::Kind::If: checkCondition(st, s); return true;
    default: return false;
  }
  return true;
}

// A loop: its bounds defined, its variable's range, and whether its trip count depends on the thread.
void Verifier::checkLoop(const Stmt& st, const Scope& s) {
  const auto& loop = st.as<op::For>();
  checkIdx(loop.begin, s, "a loop bound");
  checkIdx(loop.end, s, "a loop bound");
  if (loop.step <= 0) fail("loop {} has step {}", loop.name, loop.step);
  if (loop.unrollRing != 0 && (loop.unrollRing < 2 || constValue(loop.begin) != 0 || !constValue(loop.end)))
    fail("loop {} to be unrolled by a ring of {} needs 2 slots or more and constant bounds from 0", loop.name, loop.unrollRing);
  Scope inner = s;
  defineVar(loop.var, loop.name, inner);
  bool divergent = varies(loop.begin, s) || varies(loop.end, s);
  if (divergent) inner.varying.insert(loop.var);
  inner.expanded[loop.var] = expand(loop.begin, s) + idxVar(kTripVar + loop.var, loop.name + "_trip") * idxConst(loop.step);
  auto rb = bound(loop.begin, s), re = bound(loop.end, s);
  if (rb && re) {
    if (re->second - 1 < rb->first) inner.reachable = false;
    else inner.ranges[loop.var] = Range{rb->first, re->second - 1};
  }
  std::string saved = divergence;
  const bool savedLoop = divergentLoop;
  if (divergent && divergence.empty())
    divergence = fmt::format("for {} in {}..{}", loop.name, toString(loop.begin), toString(loop.end));
  divergentLoop = divergentLoop || divergent;
  block(st.body, std::move(inner));
  divergence = saved;
  divergentLoop = savedLoop;
}

// A condition: its operands defined; the ranges it narrows inside; a thread-dependent one makes a warp role.
void Verifier::checkCondition(const Stmt& st, const Scope& s) {
  const auto& cond = st.as<op::If>();
  checkIdx(cond.lhs, s, "a condition");
  checkIdx(cond.rhs, s, "a condition");
  Scope inner = s;
  // Narrow a variable compared with a bounded expression: `c*v + k < b` gives v <= (max(b) - 1 - k) / c,
  // `a < v` gives v >= min(a) + 1.
  auto ra = bound(cond.lhs, s), rb = bound(cond.rhs, s);
  if (ra && rb && ra->first >= rb->second) inner.reachable = false;
  if (auto av = detail::affineVar(cond.lhs); rb && av) {
    auto cur = bound(idxVar(av->var, ""), s);
    if (cur)
      inner.ranges[av->var] = Range{cur->first, std::min(cur->second, floorDivI(rb->second - 1 - av->constant, av->coef))};
  }
  if (ra && cond.rhs->op == IndexNode::Op::Var) {
    auto cur = bound(cond.rhs, inner);
    if (cur) inner.ranges[cond.rhs->var] = Range{std::max(cur->first, ra->first + 1), cur->second};
  }
  for (auto& [v, r] : inner.ranges)
    if (r.first > r.second) inner.reachable = false;
  std::string saved = divergence;
  const bool role = varies(cond.lhs, s) || varies(cond.rhs, s);
  if (divergence.empty() && role) divergence = fmt::format("if ({} < {})", toString(cond.lhs), toString(cond.rhs));
  if (role) roleConditions.emplace_back(expand(cond.lhs, s), expand(cond.rhs, s));
  block(st.body, std::move(inner));
  if (role) roleConditions.pop_back();
  divergence = saved;
}

// Global and shared loads and stores: indices in bounds and aligned. False where `st` is of another family.
bool Verifier::checkMemory(const Stmt& st, Scope& s) {
  switch (st.kind) {
    case Stmt::Kind::StoreGlobal: {
      const auto& store = st.as<op::StoreGlobal>();
      checkIdx(store.index, s, "a global store");
      checkExpr(store.value, s);
      if (store.param < 0 || store.param >= static_cast<int>(k.params.size()))
        fail("store to parameter #{} of {}", store.param, k.params.size());
      if (!k.params[store.param].written) fail("store to parameter {}, which is not marked written", k.params[store.param].name);
      return true;
    }
    case Stmt::Kind::StoreShared: {
      const auto& store = st.as<op::StoreShared>();
      checkIdx(store.index, s, "a shared store");
      checkExpr(store.value, s);
      checkSharedIndex(store.shared, store.index, s, "store");
      return true;
    }
    case Stmt::Kind::LoadVector: {
      const auto& load = st.as<op::LoadVector>();
      checkIdx(load.index, s, "a vector load");
      checkVectorAccess(load.param, load.index, load.slots.size(), s, "load");
      for (int slot : load.slots) checkSlotWrite(slot, "vector load");
      return true;
    }
    case Stmt::Kind::LoadSharedVector: checkSharedVectorLoad(st.as<op::LoadSharedVector>(), s); return true;
    case Stmt::Kind::StoreVector: {
      const auto& store = st.as<op::StoreVector>();
      checkIdx(store.index, s, "a vector store");
      for (auto& v : store.values) checkExpr(v, s);
      checkVectorAccess(store.param, store.index, store.values.size(), s, "store");
      if (!k.params[store.param].written) fail("store to parameter {}, which is not marked written", k.params[store.param].name);
      return true;
    }
    default: return false;
  }
  return true;
}

void Verifier::checkSharedVectorLoad(const op::LoadSharedVector& load, const Scope& s) {
  checkIdx(load.index, s, "a shared vector load");
  const size_t w = load.slots.size();
  if (load.shared < 0 || load.shared >= static_cast<int>(k.shared.size()))
    fail("shared vector load from buffer #{} of {}", load.shared, k.shared.size());
  const SharedBuffer& sb = k.shared[load.shared];
  const size_t bytes = w * static_cast<size_t>(dtypeBytes(sb.dtype));
  if (sb.mbarriers || (w != 2 && w != 4 && w != 8) || bytes < 8 || bytes > 16)
    fail("shared vector load of {} x {} from {}: vectors are 2 or 4 f32, or 4 or 8 bf16/f16 (8 or 16 bytes)", w,
         dtypeName(sb.dtype), sb.name);
  VarExtents extents{{kThreadIdx, k.block[0]}, {kBlockIdx, k.grid[0]}};
  if (!provablyMultipleOf(expand(load.index, s), static_cast<int64_t>(w), extents))
    fail("shared vector load not provably aligned: {}[{}] needs an index that is a multiple of {} (expanded: {})", sb.name,
         toString(load.index), w, toString(expand(load.index, s)));
  checkSharedIndex(load.shared, load.index, s, "shared vector load");
  checkSharedIndex(load.shared, load.index + idxConst(static_cast<int64_t>(w) - 1), s, "shared vector load");
  for (int slot : load.slots) checkSlotWrite(slot, "shared vector load");
}

// A counter's index is defined and provably inside a written i64 parameter of kind counters.
void Verifier::checkCounter(const op::Counter& counter, const Scope& s, const std::string& what, const char* rule) {
  checkIdx(counter.index, s, "a counter index");
  if (counter.param < 0 || counter.param >= static_cast<int>(k.params.size()))
    fail("{} at parameter #{} of {}", what, counter.param, k.params.size());
  const Param& counters = k.params[counter.param];
  if (!counters.written || counters.dtype != DType::I64 ||
      p.buffers[static_cast<size_t>(counters.buffer)].kind != loop::Buffer::Kind::Counters)
    fail("{} at parameter {}: {} a written i64 buffer of kind counters", what, counters.name, rule);
  auto r = bound(counter.index, s);
  if (!r || r->first < 0 || r->second >= counters.elements)
    fail("{}: counter index {} not provably within the {} counters of {}", what, toString(counter.index), counters.elements,
         counters.name);
}

// Barriers, block tickets and the counters blocks hand work over by. False where `st` is of another family.
bool Verifier::checkSynchronization(const Stmt& st, Scope& s) {
  switch (st.kind) {
    case Stmt::Kind::CounterRelease:
    case Stmt::Kind::CounterAwait: {
      const bool release = st.kind == Stmt::Kind::CounterRelease;
      const op::Counter& counter = release ? st.as<op::CounterRelease>().counter : st.as<op::CounterAwait>().counter;
      if (!release) checkIdx(st.as<op::CounterAwait>().count, s, "a counter's count");
      checkCounter(counter, s, release ? "counter release" : "counter wait", "counters are");
      return true;
    }
    case Stmt::Kind::BlockTicket: {
      const auto& ticket = st.as<op::BlockTicket>();
      if (!divergence.empty())
        fail("ticket {} under thread-dependent control flow `{}` (not every thread of the block reaches it)", ticket.name, divergence);
      checkCounter(ticket.counter, s, fmt::format("ticket {}", ticket.name), "tickets are taken at");
      if (ticket.blocks < 2) fail("ticket {} of {} blocks (want 2 or more)", ticket.name, ticket.blocks);
      defineVar(ticket.var, ticket.name, s);
      s.ranges[ticket.var] = Range{0, ticket.blocks - 1};
      return true;
    }
    case Stmt::Kind::Barrier:
    case Stmt::Kind::ClusterBarrier:  // and on sm_90+ (detail::checkLaunch)
      if (!divergence.empty())
        fail("barrier under thread-dependent control flow `{}` (not every thread of the block reaches it)", divergence);
      return true;
    case Stmt::Kind::NamedBarrier: {
      const auto& bar = st.as<op::NamedBarrier>();
      if (bar.id < 1 || bar.id > 15 || bar.threads < 32 || bar.threads % 32 != 0)
        fail("named barrier {} of {} threads (ids 1..15, whole warps)", bar.id, bar.threads);
      if (divergentLoop) fail("named barrier {} in a loop whose bounds depend on the thread (`{}`)", bar.id, divergence);
      std::string why = detail::checkWarpGroup(roleConditions, k.block[0] * k.block[1] * k.block[2], bar.threads);
      if (!why.empty()) fail("named barrier {} of {} threads: {}", bar.id, bar.threads, why);
      return true;
    }
    default: return false;
  }
  return true;
}

// cp.async groups, mbarriers, TMA loads and the async-proxy fences. False where `st` is of another family.
bool Verifier::checkAsyncCopy(const Stmt& st, Scope& s) {
  switch (st.kind) {
    case Stmt::Kind::CpAsync: checkCpAsync(st, s); return true;
    case Stmt::Kind::CpAsyncCommit: return true;
    case Stmt::Kind::FenceProxyAsync:
    case Stmt::Kind::FenceMbarrierInit:
      if (p.target.computeMajor < 9) fail("a fence of sm_90 and later on {}", p.target.arch);
      return true;
    case Stmt::Kind::CpAsyncWait:
      if (st.as<op::CpAsyncWait>().pendingGroups < 0) fail("cp.async.wait {}", st.as<op::CpAsyncWait>().pendingGroups);
      return true;
    case Stmt::Kind::MbarrierInit:
    case Stmt::Kind::MbarrierArrive:
    case Stmt::Kind::MbarrierArriveCluster:  // in clusters (detail::checkLaunch)
    case Stmt::Kind::CpAsyncMbarrierArrive:
    case Stmt::Kind::MbarrierExpectTx:
    case Stmt::Kind::MbarrierWait:
      if (op::isElected(st.op)) checkWarpCollective("an elected mbarrier.arrive.expect_tx");
      checkMbarrier(st, s);
      return true;
    case Stmt::Kind::TmaLoad: {  // the map and buffers (verifier_tma.cpp); here the indices: in bounds, aligned
      const auto& tma = st.as<op::TmaLoad>();
      if (tma.elected) checkWarpCollective("an elected tma.load");
      if (std::string why = detail::checkTmaLoad(k, tma); !why.empty()) fail("{}", why);
      for (const Idx* e : op::indices(st.op)) checkIdx(*e, s, "a tma.load");
      checkSharedIndex(tma.barrier.buffer, tma.barrier.index, s, "mbarrier");
      checkSharedIndex(tma.shared, tma.sharedIndex, s, "tma.load");
      checkSharedIndex(tma.shared, tma.sharedIndex + idxConst(detail::boxElements(k, tma) - 1), s, "tma.load");
      const int64_t align = detail::tmaDestinationAlignment(k, tma);
      if (!provablyMultipleOf(expand(tma.sharedIndex, s), align, VarExtents{{kThreadIdx, k.block[0]}, {kBlockIdx, k.grid[0]}}))
        fail("tma.load into {}[{}]: the index is not provably a multiple of {}", k.shared[tma.shared].name, toString(tma.sharedIndex),
             align);
      return true;
    }
    default: return false;
  }
  return true;
}

// mma.m16n8k16 from float slots, shared pairs or pair registers: the operands' counts and sources, the slots it reads.
void Verifier::checkMma(const Stmt& st, const Scope& s) {
  const auto& mma = st.as<op::Mma>();
  checkWarpCollective("mma");
  if (const auto* shared = std::get_if<op::MmaFromShared>(&mma.operands)) {  // A and B pairs of the operand type
    if (shared->aPairs.size() != 4 || shared->bPairs.size() != 2 || mma.c.size() != 4)
      fail("mma from shared with {} A pairs, {} B pairs and {} accumulator slots (want 4, 2 and 4)", shared->aPairs.size(),
           shared->bPairs.size(), mma.c.size());
    for (size_t i = 0; i < 6; ++i) {
      const int buffer = i < 4 ? shared->bufferA : shared->bufferB;
      const Idx& pair = i < 4 ? shared->aPairs[i] : shared->bPairs[i - 4];
      checkIdx(pair, s, "an mma pair");
      checkSharedIndex(buffer, pair, s, "mma pair");
      checkSharedIndex(buffer, pair + idxConst(1), s, "mma pair");
      if (!detail::provablyEven(pair)) fail("mma pair index {} is not provably even (a pair is one aligned 32-bit load)", toString(pair));
      if (k.shared[buffer].dtype != mma.operandType)
        fail("mma.{} reads pairs from shared {} of type {}", dtypeName(mma.operandType), k.shared[buffer].name,
             dtypeName(k.shared[buffer].dtype));
    }
  } else if (const auto* regs = std::get_if<op::MmaFromPairs>(&mma.operands)) {  // A and B in pair registers
    if (regs->a.size() != 4 || regs->b.size() != 2 || mma.c.size() != 4)
      fail("mma from pair registers with {} A and {} B registers and {} accumulator slots (want 4, 2 and 4)", regs->a.size(),
           regs->b.size(), mma.c.size());
    std::vector<int> all = regs->a;
    all.insert(all.end(), regs->b.begin(), regs->b.end());
    checkPairRegs(all, false, "mma");
  } else if (const auto& slots = std::get<op::MmaFromSlots>(mma.operands); slots.a.size() != 8 || slots.b.size() != 4 || mma.c.size() != 4) {
    fail("mma with {}, {} and {} fragment slots (want 8, 4 and 4)", slots.a.size(), slots.b.size(), mma.c.size());
  }
  for (int slot : op::floatSlots(st.op)) {
    if (slot < 0 || slot >= static_cast<int>(k.floatVars.size()))
      fail("mma fragment slot {} out of range ({} float variables)", slot, k.floatVars.size());
    if (!assigned[slot]) fail("mma reads float variable %{} before any assignment", k.floatVars[slot]);
  }
}

// Shuffles, pairs, ldmatrix, mma and wgmma: their registers and fragments. False where `st` is of another family.
bool Verifier::checkRegisters(const Stmt& st, Scope& s) {
  switch (st.kind) {
    case Stmt::Kind::Wgmma: checkWgmma(st, s); return true;
    case Stmt::Kind::WgmmaFence:
    case Stmt::Kind::WgmmaCommit:
    case Stmt::Kind::WgmmaWait:
      // wait_group also in the block's trailing part of a warpgroup (a producer warp: no group of its own to wait for)
      checkWarpCollective("wgmma.fence / commit_group / wait_group", kWarpgroupThreads, st.kind == Stmt::Kind::WgmmaWait);
      if (!p.target.wgmma) fail("wgmma on {}, which does not have it (sm_90a only)", p.target.arch);
      if (st.kind == Stmt::Kind::WgmmaWait) {
        const int pending = st.as<op::WgmmaWait>().pendingGroups;
        if (pending < 0 || pending > 7) fail("wgmma.wait_group {} (want 0..7)", pending);
      }
      return true;
    case Stmt::Kind::Ldmatrix: checkLdmatrix(st, s); return true;
    case Stmt::Kind::PackPair: {
      const auto& pack = st.as<op::PackPair>();
      if (pack.type != DType::BF16 && pack.type != DType::F16) fail("pack into {} pairs", dtypeName(pack.type));
      checkSlotRead(pack.lo, "pack");
      checkSlotRead(pack.hi, "pack");
      checkPairRegs({pack.reg}, true, "pack into");
      return true;
    }
    case Stmt::Kind::ShuffleXor: {
      const auto& shfl = st.as<op::ShuffleXor>();
      checkWarpCollective("shuffle");
      if (shfl.laneMask < 1 || shfl.laneMask > 16 || (shfl.laneMask & (shfl.laneMask - 1)) != 0)
        fail("shuffle with lane mask {} (want 1, 2, 4, 8 or 16)", shfl.laneMask);
      checkSlotRead(shfl.src, "shuffle");
      checkSlotWrite(shfl.dst, "shuffle");
      return true;
    }
    case Stmt::Kind::Mma: checkMma(st, s); return true;
    default: return false;
  }
  return true;
}

void Verifier::block(const Block& body, Scope s) {
  for (const Stmt& st : body)  // one family each
    if (!checkControl(st, s) && !checkMemory(st, s) && !checkSynchronization(st, s) && !checkAsyncCopy(st, s))
      checkRegisters(st, s);
}

void Verifier::run() {
  const int64_t kMaxBlock[3] = {1024, 1024, 64};
  const int64_t kMaxGrid[3] = {(int64_t{1} << 31) - 1, 65535, 65535};
  int64_t threads = 1;
  for (int d = 0; d < 3; ++d) {
    if (k.block[d] < 1 || k.block[d] > kMaxBlock[d]) fail("block dimension {} is {} (allowed 1..{})", d, k.block[d], kMaxBlock[d]);
    if (k.grid[d] < 1 || k.grid[d] > kMaxGrid[d]) fail("grid dimension {} is {} (allowed 1..{})", d, k.grid[d], kMaxGrid[d]);
    threads *= k.block[d];
  }
  if (threads > p.target.maxThreadsPerBlock) fail("{} threads per block (at most {})", threads, p.target.maxThreadsPerBlock);
  for (auto& sb : k.shared)
    if (sb.elements < 1) fail("shared buffer {} has {} elements", sb.name, sb.elements);
  const Target& target = p.target;
  if (k.sharedBytes() > target.staticSharedPerBlock)
    fail("{} bytes of static shared memory (at most {} on {}; mark large buffers dynamic)", k.sharedBytes(),
         target.staticSharedPerBlock, target.arch);
  if (k.dynamicSharedBytes < k.dynamicBuffersBytes())
    fail("dynamic shared buffers need {} bytes but the kernel launches with {} bytes of dynamic shared memory",
         k.dynamicBuffersBytes(), k.dynamicSharedBytes);
  if (k.sharedBytes() + k.groups * k.groupSharedBytes() > target.maxSharedPerBlock)
    fail("{} bytes of shared memory in all ({} static + {} dynamic; at most {} per block on {})",
         k.sharedBytes() + k.groups * k.groupSharedBytes(), k.sharedBytes(), k.groups * k.groupSharedBytes(), target.maxSharedPerBlock,
         target.arch);
  for (size_t i = 0; i < k.tensorMaps.size(); ++i)
    if (std::string why = detail::checkTensorMap(k, target, i); !why.empty()) fail("{}", why);
  if (std::string why = detail::checkLaunch(k, target); !why.empty()) fail("{}", why);
  for (auto& prm : k.params) {
    if (prm.buffer < 0 || prm.buffer >= static_cast<int>(p.buffers.size()))
      fail("parameter {} names buffer #{} of {}", prm.name, prm.buffer, p.buffers.size());
    const loop::Buffer& b = p.buffers[prm.buffer];
    if (prm.dtype != b.dtype || prm.elements != numel(b.shape))
      fail("parameter {} is {}[{}] but buffer {} is {}[{}]", prm.name, dtypeName(prm.dtype), prm.elements, b.name,
           dtypeName(b.dtype), numel(b.shape));
  }
  assigned.assign(k.floatVars.size(), false);
  pairAssigned.assign(k.pairVars.size(), false);
  Scope top;
  top.ranges[kThreadIdx] = Range{0, k.block[0] - 1};
  top.ranges[kBlockIdx] = Range{0, k.grid[0] - 1};
  block(k.body, std::move(top));
}

}  // namespace detail

void verify(const Program& p) {
  for (int b : p.inputs)
    KILN_ASSERT(b >= 0 && b < static_cast<int>(p.buffers.size()), "kernel IR verifier: input buffer #{} of {}", b, p.buffers.size());
  for (int b : p.outputs)
    KILN_ASSERT(b >= 0 && b < static_cast<int>(p.buffers.size()), "kernel IR verifier: output buffer #{} of {}", b, p.buffers.size());
  for (auto& b : p.buffers)
    KILN_ASSERT(b.kind != loop::Buffer::Kind::Weight || (b.weight && static_cast<int64_t>(b.weight->values.size()) == numel(b.shape)),
                "kernel IR verifier: weight buffer {} has no data or the wrong number of values", b.name);
  for (const Kernel& k : p.kernels) detail::Verifier(p, k).run();
}

}  // namespace kiln::kernel
