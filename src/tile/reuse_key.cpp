// tile::reuseKey (kiln/tile/reuse_key.h): a kernel's identity up to its buffers, for kernel-lower-from-tile.
#include "kiln/tile/reuse_key.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "kiln/loop/ir.h"

namespace kiln::tile {

std::string reuseKey(const Program& tp, size_t index, std::vector<int>& buffers) {
  const loop::Kernel& k = tp.loop.kernels[index];
  buffers.clear();
  std::map<int, int> order;
  auto canonical = [&](int b) {
    auto [it, fresh] = order.emplace(b, static_cast<int>(buffers.size()));
    if (fresh) buffers.push_back(b);
    return it->second;
  };
  // A kernel with its buffers renumbered in order of first appearance; none if it reads indices from memory.
  auto renumbered = [&](const loop::Kernel& original, const char* name) -> std::optional<loop::Kernel> {
    bool readsIndices = false;
    auto noteIndexLoads = [&](const loop::ExprP& e, auto& self) -> void {
      if (!e) return;
      for (auto& i : e->index) forEachIndexLoad(i, [&](const IndexNode&) { readsIndices = true; });
      for (auto& a : e->args) self(a, self);
    };
    loop::forEachKernelExpr(original, [&](const loop::ExprP& e) { noteIndexLoads(e, noteIndexLoads); });
    if (original.readOnlyAt) readsIndices = true;  // its tiles read the group's indices
    if (readsIndices) return std::nullopt;
    loop::Kernel c = original;
    c.name = name;
    c.output = canonical(original.output);
    loop::mapKernelExprs(c, [&](const loop::ExprP& e) { return loop::renumberBuffers(e, canonical); });
    return c;
  };
  loop::Program canon;
  const std::optional<loop::Kernel> ck = renumbered(k, "k");
  if (!ck) return "";
  Schedule s = tp.schedules[index];
  if (auto* t = std::get_if<TiledContraction>(&s); t && t->streamBlocks > 0) {  // its partials and counters, numbered on
    t->partials = canonical(t->partials);
    t->counters = canonical(t->counters);
  }
  if (auto* f = std::get_if<FlashAttention>(&s); f && f->keyBlocks > 1) {
    f->partials = canonical(f->partials);
    f->counters = canonical(f->counters);
  }
  std::string key;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const loop::Buffer& b = tp.loop.buffers[buffers[i]];
    canon.buffers.push_back(loop::Buffer{b.kind, fmt::format("${}", i), b.dtype, b.shape, nullptr});
    key += fmt::format("{} {} {}\n", loop::bufferKindName(b.kind), dtypeName(b.dtype), shapeString(b.shape));
  }
  // Variable ids are not printed by name; the lowering uses them, so they are part of the key.
  for (auto& a : k.parallel) key += fmt::format("p{}:{} ", a.var, a.extent);
  for (auto& st : k.stages)
    for (auto& a : st.axes) key += fmt::format("r{}:{} ", a.var, a.extent);
  if (k.attention) {
    key += fmt::format("j{}:{} ", k.attention->key.var, k.attention->key.extent);
    for (auto& a : k.attention->dot.axes) key += fmt::format("d{}:{} ", a.var, a.extent);
  }
  key += fmt::format("rows {} {}", k.rowAxes, toJson(s).dump());
  return key + "\n" + loop::printKernelBody(canon, *ck);
}

}  // namespace kiln::tile
