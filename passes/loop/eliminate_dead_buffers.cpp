// loop-eliminate-dead-buffers: removes kernels whose buffer nothing reads (and that write no output),
// then buffers no kernel uses; renumbers kernels k0, k1, ... in launch order.
#include <fmt/format.h>

#include "kiln/loop/ir.h"

namespace kiln::loop {

namespace {

bool eliminate(Program& p, bool deadKernels) {
  const std::vector<bool> live = deadKernels ? liveKernels(p) : std::vector<bool>(p.kernels.size(), true);
  std::vector<bool> read(p.buffers.size(), false);  // buffers the kept kernels, inputs and outputs use
  for (int o : p.outputs) read[o] = true;
  for (int i : p.inputs) read[i] = true;
  std::vector<Kernel> kept;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    if (!live[i]) continue;
    Kernel& k = p.kernels[i];
    read[k.output] = true;
    forEachKernelRead(k, [&](int b, bool) { read[b] = true; });
    kept.push_back(std::move(k));
  }
  bool changed = kept.size() != p.kernels.size();
  std::vector<int> newId(p.buffers.size(), -1);
  std::vector<Buffer> buffers;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (!read[b]) {
      changed = true;
      continue;
    }
    newId[b] = static_cast<int>(buffers.size());
    buffers.push_back(std::move(p.buffers[b]));
  }
  for (auto& b : buffers)
    if (b.kind == Buffer::Kind::Temp) b.name = fmt::format("t{}", &b - buffers.data());
  auto renumber = [&](int b) { return newId[b]; };
  for (size_t i = 0; i < kept.size(); ++i) {
    Kernel& k = kept[i];
    k.output = newId[k.output];
    mapKernelExprs(k, [&](const ExprP& e) { return renumberBuffers(e, renumber, &buffers); });
    if (k.readOnlyAt) k.readOnlyAt->group = renumberIndexBuffers(k.readOnlyAt->group, renumber, &buffers);
    std::string suffix = k.name.substr(k.name.find('_'));
    k.name = fmt::format("k{}{}", i, suffix);
  }
  for (int& o : p.outputs) o = newId[o];
  for (int& i : p.inputs) i = newId[i];
  p.kernels = std::move(kept);
  p.buffers = std::move(buffers);
  return changed;
}

}  // namespace

bool eliminateDeadBuffers(Program& p) { return eliminate(p, true); }
bool eliminateUnusedBuffers(Program& p) { return eliminate(p, false); }

}  // namespace kiln::loop
