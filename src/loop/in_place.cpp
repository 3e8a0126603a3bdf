// Which states a forward may update in place (loop::inPlaceStates): the memory plan then gives a state's new value the
// bytes of its current value, so that a decoder step's KV cache is neither copied into the arena before the kernels nor
// out of it after them, but stays there between steps.
#include <algorithm>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

// Whether every read of `input` in e is a load at exactly the kernel's point [p0, .., pn-1] (an axis of extent 1 may
// read as 0), never an index read.
bool readsOnlyItsOwnPoint(const ExprP& e, const Kernel& k, int input) {
  bool ok = true;
  forEachBufferRead(e, [&](int b, bool asIndex) { ok = ok && !(b == input && asIndex); });
  forEachLoad(e, [&](const Expr& load) {
    if (load.buffer != input) return;
    if (load.index.size() != k.parallel.size()) {
      ok = false;
      return;
    }
    for (size_t d = 0; d < k.parallel.size(); ++d) {
      const Axis& a = k.parallel[d];
      const std::optional<int64_t> c = constValue(load.index[d]);
      ok = ok && (sameIdx(load.index[d], idxVar(a.var, a.name)) || (a.extent == 1 && c && *c == 0));
    }
  });
  return ok;
}

}  // namespace

std::vector<std::pair<int, int>> inPlaceStates(const Program& p, size_t states) {
  std::vector<std::pair<int, int>> pairs;
  if (states == 0 || states > p.inputs.size() || states > p.outputs.size()) return pairs;
  std::vector<int> writer(p.buffers.size(), -1);
  std::vector<int> writes(p.buffers.size(), 0);
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    writer[static_cast<size_t>(p.kernels[k].output)] = static_cast<int>(k);
    ++writes[static_cast<size_t>(p.kernels[k].output)];
  }
  for (size_t s = 0; s < states; ++s) {
    const int input = p.inputs[p.inputs.size() - states + s], output = p.outputs[p.outputs.size() - states + s];
    const Buffer &in = p.buffers[static_cast<size_t>(input)], &out = p.buffers[static_cast<size_t>(output)];
    if (input == output || out.kind != Buffer::Kind::Output || in.shape != out.shape || in.dtype != out.dtype) continue;
    if (writes[static_cast<size_t>(output)] != 1 || std::count(p.outputs.begin(), p.outputs.end(), output) != 1) continue;
    const int w = writer[static_cast<size_t>(output)];
    const Kernel& k = p.kernels[static_cast<size_t>(w)];
    if (!k.stages.empty() || k.attention || !readsOnlyItsOwnPoint(k.result, k, input)) continue;
    bool readLater = false;
    for (size_t later = static_cast<size_t>(w) + 1; later < p.kernels.size() && !readLater; ++later)
      forEachKernelRead(p.kernels[later], [&](int b, bool) { readLater = readLater || b == input; });
    if (!readLater) pairs.emplace_back(output, input);
  }
  return pairs;
}

}  // namespace kiln::loop
