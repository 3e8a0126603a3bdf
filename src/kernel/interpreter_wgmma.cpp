// The Kernel-IR interpreter's warpgroup products (interpreter_machine.h; semantics in kernel/ir.h, wgmma()). A wgmma
// multiplies when it is issued, reading shared memory then, and the rules that make that equal to the hardware's
// asynchronous execution are checked instead:
//   - it reads only elements whose last writer has since run fence.proxy.async (and, as for any shared read, that a
//     barrier has published to the block);
//   - from issue until a wait_group leaves its group no longer pending, nothing writes what it read (a store, or a
//     cp.async issued into it).
#include <fmt/format.h>

#include <algorithm>

#include "interpreter_machine.h"
#include "kiln/kernel/operand_layout.h"
#include "kiln/loop/ir.h"

namespace kiln::kernel::interp {

void Machine::resetWgmma() {
  unfenced.resize(k.shared.size());
  pinned.resize(k.shared.size());
  for (size_t b = 0; b < k.shared.size(); ++b) {
    unfenced[b].assign(static_cast<size_t>(k.shared[b].elements), 0);
    pinned[b].assign(static_cast<size_t>(k.shared[b].elements), 0);
  }
  wgOpen.assign(static_cast<size_t>((T + kWarpgroupThreads - 1) / kWarpgroupThreads), {});
  wgCommitted.assign(wgOpen.size(), {});
}

void Machine::noteSharedWrite(int buffer, int64_t i, int64_t t) {
  if (pinned[buffer][i] > 0)
    raise(fmt::format("kernel {}: thread {} of block {} writes shared {}[{}], which a wgmma that has not been waited for reads",
                      k.name, t, block, k.shared[buffer].name, i));
  unfenced[buffer][i] = static_cast<int32_t>(t) + 1;
}

std::vector<int64_t> Machine::activeWarpgroups(const std::vector<uint8_t>& mask, const char* what, bool trailing) {
  // A block may end in a part of a warpgroup (a producer warp): those threads must not reach it.
  std::vector<int64_t> groups;
  for (int64_t q = 0; q * kWarpgroupThreads < T; ++q) {
    const auto first = mask.begin() + q * kWarpgroupThreads, last = mask.begin() + std::min(T, (q + 1) * kWarpgroupThreads);
    const int64_t active = std::count(first, last, uint8_t{1});
    if (trailing && last - first != kWarpgroupThreads && active == last - first) continue;
    if (active != 0 && last - first != kWarpgroupThreads)
      raise(fmt::format("kernel {}: {} reached by threads of the block's last {} (not whole warpgroups)", k.name, what, last - first));
    if (active != 0 && active != kWarpgroupThreads)
      raise(fmt::format("kernel {}: {} reached by {} of the 128 threads of warpgroup {} (block {})", k.name, what, active, q, block));
    if (active) groups.push_back(q);
  }
  return groups;
}

// Per active warpgroup: the operands gathered from shared memory through the core-matrix layouts, rounded to the
// operand type; D accumulated in f32 over k in order, as mma does; the elements read pinned in the open group.
void Machine::wgmmaStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  const auto& wg = s.as<op::Wgmma>();
  const int64_t n = wg.n;
  for (int64_t q : activeWarpgroups(mask, "wgmma")) {
    const int64_t first = q * kWarpgroupThreads;
    auto start = [&](const Idx& at, const char* which) {
      const int64_t v = evaluate(at, env[first], &loader);
      for (int64_t t = first + 1; t < first + kWarpgroupThreads; ++t)
        if (evaluate(at, env[t], &loader) != v)
          raise(fmt::format("kernel {}: wgmma {} start {} differs between threads {} and {} of warpgroup {} (block {})", k.name,
                            which, toString(at), first, t, q, block));
      return v;
    };
    auto gather = [&](int buffer, int64_t from, const Stmt::CoreMatrices& l, int64_t rows, const char* which) {
      if (l.swizzle128 && l.mnMajor && from % 512 != 0)
        raise(fmt::format("kernel {}: wgmma {} starts at shared {}[{}], not at an 8-row group of 64-element rows (MN-major, "
                          "128-byte swizzle; block {})", k.name, which, k.shared[buffer].name, from, block));
      if (l.swizzle128 && !l.mnMajor && ((from / 64) % 8 != 0 || from % 64 + kWgmmaK > 64))
        raise(fmt::format("kernel {}: wgmma {} starts at shared {}[{}], not in the first row of an 8-row group of 64-element "
                          "rows with 16 columns left in the row (128-byte swizzle; block {})", k.name, which,
                          k.shared[buffer].name, from, block));
      std::vector<float> m(static_cast<size_t>(rows * kWgmmaK));
      const std::vector<float>& data = shared[buffer];
      const SharedLayout layout = wgmmaOperandLayout(l);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t kk = 0; kk < kWgmmaK; ++kk) {
          const int64_t e = layout(from, r, kk);
          if (e < 0 || e >= static_cast<int64_t>(data.size()))
            raise(fmt::format("kernel {}: wgmma {} element ({}, {}) at shared {}[{}], outside its {} elements (block {})", k.name,
                              which, r, kk, k.shared[buffer].name, e, data.size(), block));
          checkSharedRead(buffer, e, first);
          if (!written[buffer][e])
            raise(fmt::format("kernel {}: wgmma of warpgroup {} reads shared {}[{}] that no thread wrote (block {})", k.name, q,
                              k.shared[buffer].name, e, block));
          if (async && landed[buffer][e] >= 0)
            raise(fmt::format("kernel {}: wgmma of warpgroup {} reads shared {}[{}], which thread {}'s cp.async wrote, with no "
                              "barrier after that thread's wait (block {})", k.name, q, k.shared[buffer].name, e,
                              landed[buffer][e], block));
          if (int32_t writer = unfenced[buffer][e]; writer > 0)
            raise(fmt::format("kernel {}: wgmma of warpgroup {} reads shared {}[{}], written by thread {} with no fence.proxy.async "
                              "after the write (block {})", k.name, q, k.shared[buffer].name, e, writer - 1, block));
          m[static_cast<size_t>(r * kWgmmaK + kk)] = loop::roundTo(wg.operandType, data[e]);
          wgOpen[static_cast<size_t>(q)].emplace_back(buffer, e);
          ++pinned[buffer][e];
        }
      return m;
    };
    // A from shared memory, or (wgmmaRegA) element i of thread 32w + l's mma A fragment from its pair register i / 2.
    std::vector<float> a(static_cast<size_t>(kWgmmaM * kWgmmaK));
    if (const auto* sharedA = std::get_if<op::SharedMatrix>(&wg.a)) {
      a = gather(sharedA->buffer, start(sharedA->start, "A"), sharedA->layout, kWgmmaM, "A");
    } else {
      const std::vector<int>& regs = std::get<op::PairRegs>(wg.a).regs;
      for (int64_t t = 0; t < kWarpgroupThreads; ++t)
        for (int i = 0; i < 8; ++i) {
          const int reg = regs[static_cast<size_t>(i / 2)];
          KILN_ASSERT(reg >= 0 && reg < np, "kernel {}: wgmma reads pair register {} of {}", k.name, reg, np);
          auto [r, c] = mmaElementA(static_cast<int>(t % 32), i);
          a[static_cast<size_t>((16 * (t / 32) + r) * kWgmmaK + c)] =
              loop::roundTo(wg.operandType, pairValues[((first + t) * np + reg) * 2 + i % 2]);
        }
    }
    const std::vector<float> b = gather(wg.b.buffer, start(wg.b.start, "B"), wg.b.layout, n, "B");
    const bool overwrite = wg.scaleD && start(wg.scaleD, "scale-d") == 0;  // D = A·B
    for (int64_t t = 0; t < kWarpgroupThreads; ++t)
      for (size_t i = 0; i < wg.acc.size(); ++i) {
        auto [r, c] = wgmmaElement(static_cast<int>(t), static_cast<int>(i));
        float& acc = floats[(first + t) * nf + wg.acc[i]];
        if (overwrite) acc = 0.f;
        for (int64_t kk = 0; kk < kWgmmaK; ++kk) acc += a[static_cast<size_t>(r * kWgmmaK + kk)] * b[static_cast<size_t>(c * kWgmmaK + kk)];
      }
  }
}

void Machine::wgmmaCommitStep(const std::vector<uint8_t>& mask) {
  for (int64_t q : activeWarpgroups(mask, "wgmma.commit_group")) {
    if (!wgmmaUsed) continue;
    wgCommitted[static_cast<size_t>(q)].push_back(std::move(wgOpen[static_cast<size_t>(q)]));
    wgOpen[static_cast<size_t>(q)].clear();
  }
}

void Machine::wgmmaWaitStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  for (int64_t q : activeWarpgroups(mask, "wgmma.wait_group", true)) {
    if (!wgmmaUsed) continue;
    auto& groups = wgCommitted[static_cast<size_t>(q)];
    while (static_cast<int64_t>(groups.size()) > s.as<op::WgmmaWait>().pendingGroups) {
      for (auto [buffer, e] : groups.front()) --pinned[buffer][e];
      groups.pop_front();
    }
  }
}

void Machine::fenceProxyAsyncStep(const std::vector<uint8_t>& mask) {
  if (!wgmmaUsed) return;
  for (auto& elements : unfenced)
    for (int32_t& writer : elements)
      if (writer > 0 && mask[static_cast<size_t>(writer - 1)]) writer = 0;
}

}  // namespace kiln::kernel::interp
