#include "kiln/loop/ir.h"
#include "kiln/support/error.h"

namespace kiln::loop {

namespace {

bool readsAcc(const ExprP& e, int maxStage) {
  if (e->kind == Expr::Kind::Acc) return e->stage > maxStage;
  for (auto& a : e->args)
    if (readsAcc(a, maxStage)) return true;
  return false;
}

// An attention kernel (OnlineSoftmax): the shape of its parts and which variables each part may read.
template <class CheckLoads>
void verifyAttention(const Kernel& k, CheckLoads& checkLoads) {
  const OnlineSoftmax& a = *k.attention;
  KILN_ASSERT(k.stages.empty() && k.rowAxes < static_cast<int>(k.parallel.size()),
              "kernel {}: an attention kernel has no stages and rows of the axes before its width axis", k.name);
  for (size_t d = static_cast<size_t>(k.rowAxes) + 1; d < k.parallel.size(); ++d)
    KILN_ASSERT(k.parallel[d].extent == 1, "kernel {}: attention axis {} after the width axis has extent {}", k.name,
                k.parallel[d].name, k.parallel[d].extent);
  KILN_ASSERT(a.dot.fn == ReduceFn::Sum && !a.dot.axes.empty(), "kernel {}: attention's dot is a sum", k.name);
  checkLoads(a.dot.value, true);
  checkLoads(a.score, true);
  checkLoads(a.value, true);
  const Axis& width = k.parallel[static_cast<size_t>(k.rowAxes)];
  KILN_ASSERT(!usesVar(*a.dot.value, width.var) && !usesVar(*a.score, width.var), "kernel {}: attention scores read {}", k.name,
              width.name);
  for (auto& d : a.dot.axes) {
    KILN_ASSERT(!usesVar(*a.score, d.var) && !usesVar(*a.value, d.var) && !usesVar(*k.result, d.var),
                "kernel {}: {} is read outside attention's dot", k.name, d.name);
  }
  KILN_ASSERT(!usesVar(*k.result, a.key.var), "kernel {}: the result reads the key axis {}", k.name, a.key.name);
  KILN_ASSERT(!readsAcc(a.dot.value, -1) && !readsAcc(a.value, -1) && !readsAcc(a.score, 0) && !readsAcc(k.result, 0),
              "kernel {}: attention reads an accumulator it does not have", k.name);
}

// Kernel::readOnlyAt: the group is an index over the row axis alone, inside the first axis' extent.
void verifyReadOnlyAt(const Kernel& k) {
  const ReadOnlyAt& r = *k.readOnlyAt;
  KILN_ASSERT(r.group && r.rowAxis > 0 && r.rowAxis < static_cast<int>(k.parallel.size()),
              "kernel {}: 'read only at' names no row axis after the first", k.name);
  const Axis& row = k.parallel[static_cast<size_t>(r.rowAxis)];
  forEachVar(r.group, [&](int v) {
    KILN_ASSERT(v == row.var, "kernel {}: the group {} reads a variable other than {}", k.name, toString(r.group), row.name);
  });
  auto range = idxRange(r.group, {{row.var, row.extent}});
  KILN_ASSERT(range && range->first >= 0 && range->second < k.parallel[0].extent, "kernel {}: the group {} may leave [0, {})",
              k.name, toString(r.group), k.parallel[0].extent);
}

}  // namespace

void verify(const Program& p) {
  const int nb = static_cast<int>(p.buffers.size());
  std::vector<bool> written(nb, false);
  for (int b = 0; b < nb; ++b) {
    auto k = p.buffers[b].kind;
    if (k == Buffer::Kind::Input || k == Buffer::Kind::Weight) written[b] = true;
    if (k == Buffer::Kind::Weight) KILN_ASSERT(p.buffers[b].weight, "weight buffer {} has no data", p.buffers[b].name);
  }
  for (const Kernel& k : p.kernels) {
    KILN_ASSERT(k.output >= 0 && k.output < nb, "kernel {} writes buffer {} out of range", k.name, k.output);
    const Buffer& out = p.buffers[k.output];
    KILN_ASSERT(k.parallel.size() == out.shape.size(), "kernel {}: {} parallel axes for a rank-{} output", k.name,
                k.parallel.size(), out.shape.size());
    for (size_t d = 0; d < k.parallel.size(); ++d)
      KILN_ASSERT(k.parallel[d].extent == out.shape[d], "kernel {}: axis {} extent {} != output dim {}", k.name,
                  k.parallel[d].name, k.parallel[d].extent, out.shape[d]);
    VarExtents ext = k.extents();
    auto checkLoads = [&](const ExprP& e, bool inReduction) {
      forEachBufferRead(e, [&](int b, bool) {
        KILN_ASSERT(b >= 0 && b < nb && written[b], "kernel {} reads buffer {} before any kernel writes it", k.name, b);
      });
      forEachLoad(e, [&](const Expr& l) {
        KILN_ASSERT(l.buffer >= 0 && l.buffer < nb, "kernel {} loads buffer {} out of range", k.name, l.buffer);
        const Buffer& b = p.buffers[l.buffer];
        KILN_ASSERT(written[l.buffer], "kernel {} reads {} before any kernel writes it", k.name, b.name);
        KILN_ASSERT(l.index.size() == b.shape.size(), "kernel {}: load of {} has {} indices", k.name, b.name, l.index.size());
        for (size_t d = 0; d < l.index.size(); ++d) {
          forEachVar(l.index[d], [&](int v) {
            KILN_ASSERT(ext.count(v), "kernel {}: index {} uses an unknown variable", k.name, toString(l.index[d]));
            if (!inReduction)
              for (auto& s : k.stages)
                for (auto& a : s.axes) KILN_ASSERT(a.var != v, "kernel {}: result uses reduction axis {}", k.name, a.name);
          });
          auto r = idxRange(l.index[d], ext);
          KILN_ASSERT(r && r->first >= 0 && r->second < b.shape[d], "kernel {}: index {} of {} may leave [0, {})", k.name,
                      toString(l.index[d]), b.name, b.shape[d]);
        }
      });
    };
    KILN_ASSERT(k.rowAxes >= 0 && k.rowAxes <= static_cast<int>(k.parallel.size()), "kernel {}: rowAxes {}", k.name, k.rowAxes);
    for (size_t s = 0; s < k.stages.size(); ++s) {
      checkLoads(k.stages[s].value, true);
      std::function<void(const ExprP&)> accs = [&](const ExprP& e) {
        if (e->kind == Expr::Kind::Acc)
          KILN_ASSERT(e->stage >= 0 && e->stage < static_cast<int>(s), "kernel {}: stage {} uses acc{}", k.name, s, e->stage);
        for (auto& a : e->args) accs(a);
      };
      accs(k.stages[s].value);
      // A stage runs once per row: it may not depend on the axes a row's write loop covers.
      forEachLoad(k.stages[s].value, [&](const Expr& l) {
        for (auto& i : l.index)
          forEachVar(i, [&](int v) {
            for (size_t d = k.rowAxes; d < k.parallel.size(); ++d)
              KILN_ASSERT(k.parallel[d].var != v, "kernel {}: stage {} uses {}, which is not a row axis", k.name, s, k.parallel[d].name);
          });
      });
    }
    if (k.attention) verifyAttention(k, checkLoads);
    if (k.readOnlyAt) verifyReadOnlyAt(k);
    checkLoads(k.result, false);
    written[k.output] = true;
  }
  for (int o : p.outputs) KILN_ASSERT(o >= 0 && o < nb && written[o], "output buffer {} is never written", o);
}

}  // namespace kiln::loop
