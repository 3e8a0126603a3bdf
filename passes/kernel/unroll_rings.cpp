// kernel-unroll-rings (kiln/kernel/lower.h): a k loop that kernel-lower-from-tile marked `unroll ring D` (a product
// with a producer warp whose schedule asks for it, TiledContraction::unrollRing; tile-unroll-rings says why) walks
// rounds of D steps instead of one step a slice. With k0 stepping by tile_k from 0 and slice i = k0 div tile_k using
// ring slot i mod D, the loop becomes
//   for k0 in 0..K step D * tile_k { round = k0 div (D * tile_k); step 0; step 1; ...; step D - 1 }
// where step s is the old body at slice round * D + s:
//  - the slice, `k0 div tile_k` wherever the body reads it, becomes `k0 div tile_k + s`;
//  - a definition at the top of the body that reads only k0 and has one value at step s of every round (the ring slot
//    and the slot a step frees) is that constant in step s, and goes;
//  - an mbarrier wait's parity ((slice + c) div D + l) mod 2, the phase of a slot's barrier, becomes
//    (round + (s + c) div D + l) mod 2: one parity per round, nothing computed from k in the step;
//  - the other indices that changed are simplified again, as the lowering simplified them when it built them;
//    conditions and parities stay as built;
//  - where the slices do not fill the last round, the steps past them are skipped (a guard on the slice, uniform).
// Every step reads the same slice as before, so the results are the rolled loop's (tests run both in the interpreter).
// A marked loop the pass cannot prove this for (a definition in the body that is not a step's constant, a float
// expression reading the slice) stays rolled: that is still correct, only slower. So does a loop of one slice.
#include <map>

#include "bodies.h"
#include "kiln/kernel/lower.h"

namespace kiln::kernel {
namespace {

using Op = IndexNode::Op;

struct RingLoop {
  int k0 = -1;
  int64_t tileK = 0, K = 0, depth = 0, slices = 0;
  VarExtents extents;  // the kernel's variables before the loop, k0 over [0, K)
};

// Whether e is the loop's slice, k0 div tile_k.
bool isSlice(const Idx& e, const RingLoop& r) {
  return e->op == Op::FloorDiv && e->a->op == Op::Var && e->a->var == r.k0 && constValue(e->b) == r.tileK;
}

// One step's view of the body: the slice it multiplies and the ring definitions' constants.
struct Step {
  const RingLoop* ring;
  int64_t s;
  Idx slice;                            // k0 div tile_k + s, as the lowering simplified it
  std::map<int, int64_t> constants;     // ring definitions' variables
  Idx round;                            // the round's variable

  // e with the slice and the ring definitions replaced, rebuilt by the constructors that built it (so constants fold
  // as they did). `changed` tells whether anything was replaced.
  Idx replace(const Idx& e, bool& changed) const {
    if (!e) return e;
    if (isSlice(e, *ring)) {
      changed = true;
      return slice;
    }
    switch (e->op) {
      case Op::Const: return e;
      case Op::Var: {
        auto c = constants.find(e->var);
        if (c != constants.end()) {
          changed = true;
          return idxConst(c->second);
        }
        if (e->var != ring->k0) return e;
        changed = true;  // k0 itself: this step's k0 is the round's plus s slices
        return idxAdd(e, s * ring->tileK);
      }
      case Op::Load: {
        bool inner = false;
        Idx a = replace(e->a, inner);
        if (!inner) return e;
        changed = true;
        return idxLoad(e->buffer, e->name, a);
      }
      default: break;
    }
    bool inner = false;
    Idx a = replace(e->a, inner), b = replace(e->b, inner);
    if (!inner) return e;
    changed = true;
    switch (e->op) {
      case Op::Add: return a + b;
      case Op::Mul: return a * b;
      case Op::FloorDiv: return floorDiv(a, b->value);
      case Op::Mod: return mod(a, b->value);
      case Op::Min: return idxMin(a, b);
      case Op::Max: return idxMax(a, b);
      case Op::Xor: return idxXor(a, b);
      case Op::Shl: return shl(a, b->value);
      case Op::Shr: return shr(a, b->value);
      default: return e;
    }
  }

  // A slot barrier's parity ((slice + c) div D + l) mod 2 as (round + q) mod 2, q = (s + c) div D + l; null when the
  // parity has another form.
  Idx roundParity(const Idx& p) const {
    if (p->op != Op::Mod || constValue(p->b) != 2) return nullptr;
    Idx x = p->a;
    int64_t later = 0;
    if (x->op == Op::Add && constValue(x->b)) {
      later = x->b->value;
      x = x->a;
    }
    if (x->op != Op::FloorDiv || constValue(x->b) != ring->depth) return nullptr;
    Idx a = x->a;
    int64_t c = 0;
    if (a->op == Op::Add && constValue(a->b) && isSlice(a->a, *ring)) {
      c = a->b->value;
      a = a->a;
    }
    if (!isSlice(a, *ring) || s + c < 0) return nullptr;
    const int64_t q = (s + c) / ring->depth + later;
    return q == 0 ? mod(round, 2) : mod(idxAdd(round, q), 2);
  }

  // A statement of the step: its conditions and barrier indices replaced as built, its parities per round, its other
  // indices replaced and simplified again.
  Stmt statement(const Stmt& in) const {
    Stmt s = in;
    const op::Mbarrier* barrier = op::mbarrierOf(s.op);
    const auto* wait = std::get_if<op::MbarrierWait>(&s.op);
    for (const Idx* at : op::indices(s.op)) {
      Idx& e = const_cast<Idx&>(*at);  // an index of s, which this function owns
      if (!e) continue;
      if (wait && at == &wait->parity) {
        if (Idx p = roundParity(e)) {
          e = p;
          continue;
        }
      }
      bool changed = false;
      Idx r = replace(e, changed);
      if (!changed) continue;
      const bool asBuilt = s.kind == Stmt::Kind::If || (barrier && at == &barrier->index) || (wait && at == &wait->parity);
      e = asBuilt ? r : simplify(r, ring->extents);
    }
    s.body.clear();
    for (const Stmt& c : in.body) s.body.push_back(statement(c));
    return s;
  }
};

// Whether the unrolled steps could not be built: a statement of the body (past the ring definitions) defines a
// variable (each step would define it again in one scope) or a float expression reads the slice or a ring definition.
bool blocksUnrolling(const Block& b, const std::set<int>& ringVars) {
  for (const Stmt& s : b) {
    if (op::definedVar(s.op) >= 0) return true;
    std::set<int> read;
    for (const FE* f : op::floatValues(s.op)) varsRead(*f, read);
    for (int v : read)
      if (ringVars.count(v)) return true;
    if (blocksUnrolling(s.body, ringVars)) return true;
  }
  return false;
}

// The value of a definition at step s of every round, when it reads only k0 and that is one value. A step that no
// round reaches (fewer slices than slots: the guard skips it) takes the slot s steps after step 0's, as a ring's
// slots advance by one a step; nothing it computes is used.
std::optional<int64_t> stepConstant(const Idx& value, const RingLoop& r, int64_t s, size_t envSize) {
  bool onlyK0 = true;
  forEachVar(value, [&](int v) { onlyK0 = onlyK0 && v == r.k0; });
  if (!onlyK0) return std::nullopt;
  std::vector<int64_t> env(envSize, 0);
  std::optional<int64_t> seen;
  for (int64_t slice = s; slice < r.slices; slice += r.depth) {
    env[static_cast<size_t>(r.k0)] = slice * r.tileK;
    const int64_t v = evaluate(value, env);
    if (seen && *seen != v) return std::nullopt;
    seen = v;
  }
  if (!seen && s > 0) {
    auto first = stepConstant(value, r, 0, envSize);
    if (first) seen = ((*first + s) % r.depth + r.depth) % r.depth;
  }
  return seen;
}

// The rounds of a marked loop, or nothing when it must stay rolled.
std::optional<Stmt> unrolled(const Kernel& k, const Stmt& loop, int& nextVar) {
  const auto& f = loop.as<op::For>();
  if (constValue(f.begin) != 0 || !constValue(f.end) || f.unrollRing < 2) return std::nullopt;
  RingLoop r;
  r.k0 = f.var;
  r.tileK = f.step;
  r.K = *constValue(f.end);
  r.depth = f.unrollRing;
  r.slices = (r.K + r.tileK - 1) / r.tileK;
  if (r.slices < 2) return std::nullopt;  // one step: nothing to unroll (the lowering simplified the slice to 0)
  r.extents = extentsAt(k, loop);
  r.extents[r.k0] = r.K;
  const size_t envSize = static_cast<size_t>(maxVar(k.body)) + 1;
  // The ring definitions: the leading definitions that are constants of every step.
  size_t defs = 0;
  std::set<int> ringVars{r.k0};
  for (; defs < loop.body.size(); ++defs) {
    const auto* d = std::get_if<op::DefIdx>(&loop.body[defs].op);
    if (!d) break;
    for (int64_t s = 0; s < r.depth; ++s)
      if (!stepConstant(d->value, r, s, envSize)) return std::nullopt;
    ringVars.insert(d->var);
  }
  const Block steps(loop.body.begin() + static_cast<std::ptrdiff_t>(defs), loop.body.end());
  if (blocksUnrolling(steps, ringVars)) return std::nullopt;
  const int64_t roundK = r.depth * r.tileK, rounds = (r.slices + r.depth - 1) / r.depth;
  Block body;
  const int roundVar = nextVar++;
  body.push_back(defIdx(roundVar, "round", simplify(floorDiv(idxVar(r.k0, f.name), roundK), r.extents)));
  r.extents[roundVar] = rounds;
  for (int64_t s = 0; s < r.depth; ++s) {
    Step st{&r, s, simplify(floorDiv(idxVar(r.k0, f.name), r.tileK) + idxConst(s), r.extents), {}, idxVar(roundVar, "round")};
    for (size_t i = 0; i < defs; ++i) {
      const auto& d = loop.body[i].as<op::DefIdx>();
      st.constants[d.var] = *stepConstant(d.value, r, s, envSize);
    }
    Block out;
    for (const Stmt& c : steps) out.push_back(st.statement(c));
    if (r.slices % r.depth == 0 || s < r.slices % r.depth) {
      body.insert(body.end(), out.begin(), out.end());
    } else {  // the last round stops short of this step
      body.push_back(ifLess(st.slice, idxConst(r.slices), std::move(out)));
    }
  }
  return forLoop(r.k0, f.name, f.begin, f.end, roundK, std::move(body));
}

bool unrollIn(const Kernel& k, Block& b, int& nextVar) {
  bool changed = false;
  for (Stmt& s : b) {
    if (const auto* f = std::get_if<op::For>(&s.op); f && f->unrollRing > 0) {
      if (auto rounds = unrolled(k, s, nextVar)) {
        s = std::move(*rounds);
        changed = true;
        continue;
      }
    }
    changed |= unrollIn(k, s.body, nextVar);
  }
  return changed;
}

}  // namespace

bool unrollRings(Program& p) {
  bool changed = false;
  for (Kernel& k : p.kernels) {
    int nextVar = maxVar(k.body) + 1;
    changed |= unrollIn(k, k.body, nextVar);
  }
  return changed;
}

}  // namespace kiln::kernel
