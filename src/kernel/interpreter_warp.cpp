// The Kernel-IR interpreter's warp-collective statements (interpreter_machine.h): each runs once per warp with
// all 32 lanes' operands gathered before any result is written, as the hardware instruction does.
#include <fmt/format.h>

#include <algorithm>

#include "interpreter_machine.h"
#include "kiln/loop/ir.h"

namespace kiln::kernel::interp {

int64_t Machine::warpActive(int64_t w, const std::vector<uint8_t>& mask, const char* what) {
  int64_t active = std::count(mask.begin() + w * 32, mask.begin() + w * 32 + 32, uint8_t{1});
  if (active != 0 && active != 32)
    raise(fmt::format("kernel {}: {} reached by {} of 32 lanes of warp {} (block {})", k.name, what, active, w, block));
  return active;
}

// One mma.m16n8k16 per warp: gather the tiles from the lanes' fragment slots (the layout of kernel/ir.h),
// multiply in f32 after rounding A and B to the operand type, accumulate over k in order, scatter D.
void Machine::mmaStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  if (T % 32 != 0) raise(fmt::format("kernel {}: mma in a block of {} threads (not whole warps)", k.name, T));
  const auto& mma = s.as<op::Mma>();
  for (int64_t w = 0; w < T / 32; ++w) {
    if (warpActive(w, mask, "mma") == 0) continue;
    float a[kMmaM][kMmaK], b[kMmaK][kMmaN], c[kMmaM][kMmaN];
    const auto* fromShared = std::get_if<op::MmaFromShared>(&mma.operands);
    const auto* fromPairs = std::get_if<op::MmaFromPairs>(&mma.operands);
    const auto* fromSlots = std::get_if<op::MmaFromSlots>(&mma.operands);
    if (fromShared)
      KILN_ASSERT(fromShared->bufferA >= 0 && fromShared->bufferA < static_cast<int>(shared.size()) && fromShared->bufferB >= 0 &&
                      fromShared->bufferB < static_cast<int>(shared.size()),
                  "kernel {}: mma reads shared buffers #{} and #{} of {}", k.name, fromShared->bufferA, fromShared->bufferB,
                  shared.size());
    auto slot = [&](int lane, int slotId) -> float& { return floats[(w * 32 + lane) * nf + slotId]; };
    // Operand element i of a lane: its fragment slot, its pair register's half, or element i % 2 of pair i / 2 in shared memory.
    auto operand = [&](int lane, int i, bool isA) -> float {
      if (fromPairs) {
        const int reg = (isA ? fromPairs->a : fromPairs->b)[static_cast<size_t>(i / 2)];
        KILN_ASSERT(reg >= 0 && reg < np, "kernel {}: mma reads pair register {} of {}", k.name, reg, np);
        return pairValues[((w * 32 + lane) * np + reg) * 2 + i % 2];
      }
      if (fromSlots) return slot(lane, (isA ? fromSlots->a : fromSlots->b)[static_cast<size_t>(i)]);
      const int buffer = isA ? fromShared->bufferA : fromShared->bufferB;
      const Idx& at = (isA ? fromShared->aPairs : fromShared->bPairs)[static_cast<size_t>(i / 2)];
      int64_t first = evaluate(at, env[w * 32 + lane], &loader);
      const std::vector<float>& data = shared[buffer];
      if (first % 2 != 0 || first < 0 || first + 1 >= static_cast<int64_t>(data.size()))
        raise(fmt::format("kernel {}: lane {} of warp {} reads an mma pair at shared {}[{}] (must be even and inside its {} "
                          "elements; index {})", k.name, lane, w, k.shared[buffer].name, first, data.size(), toString(at)));
      int64_t e = first + i % 2;
      checkSharedRead(buffer, e, w * 32 + lane);
      if (!written[buffer][e])
        raise(fmt::format("kernel {}: lane {} of warp {} reads shared {}[{}] that no thread wrote (mma pair, block {})", k.name,
                          lane, w, k.shared[buffer].name, e, block));
      return data[e];
    };
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) {
        auto [r, col] = mmaElementA(lane, i);
        a[r][col] = loop::roundTo(mma.operandType, operand(lane, i, true));
      }
      for (int i = 0; i < 4; ++i) {
        auto [r, col] = mmaElementB(lane, i);
        b[r][col] = loop::roundTo(mma.operandType, operand(lane, i, false));
        auto [cr, cc] = mmaElementC(lane, i);
        c[cr][cc] = slot(lane, mma.c[static_cast<size_t>(i)]);
      }
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        auto [r, col] = mmaElementC(lane, i);
        float acc = c[r][col];
        for (int kk = 0; kk < kMmaK; ++kk) acc += a[r][kk] * b[kk][col];
        slot(lane, mma.c[static_cast<size_t>(i)]) = acc;
      }
  }
}

// __shfl_xor_sync over full warps: every lane reads src of lane ^ mask before any lane writes dst.
void Machine::shuffleStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  if (T % 32 != 0) raise(fmt::format("kernel {}: shuffle in a block of {} threads (not whole warps)", k.name, T));
  const auto& shfl = s.as<op::ShuffleXor>();
  float got[32];
  for (int64_t w = 0; w < T / 32; ++w) {
    if (warpActive(w, mask, "shuffle") == 0) continue;
    for (int lane = 0; lane < 32; ++lane) got[lane] = floats[(w * 32 + (lane ^ shfl.laneMask)) * nf + shfl.src];
    for (int lane = 0; lane < 32; ++lane) floats[(w * 32 + lane) * nf + shfl.dst] = got[lane];
  }
}

// ldmatrix per warp: lanes 0 .. 8*count-1 supply the row addresses, every lane receives two elements per matrix.
void Machine::ldmatrixStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  if (T % 32 != 0) raise(fmt::format("kernel {}: ldmatrix in a block of {} threads (not whole warps)", k.name, T));
  const auto& ld = s.as<op::Ldmatrix>();
  const int buffer = ld.shared;
  KILN_ASSERT(buffer >= 0 && buffer < static_cast<int>(shared.size()), "kernel {}: ldmatrix from shared buffer #{} of {}",
              k.name, buffer, shared.size());
  const auto* toPairs = std::get_if<op::PairRegs>(&ld.into);
  const auto* toSlots = std::get_if<op::FloatSlots>(&ld.into);
  const int count = ld.matrices();
  if (toPairs)
    for (int reg : toPairs->regs) KILN_ASSERT(reg >= 0 && reg < np, "kernel {}: ldmatrix into pair register {} of {}", k.name, reg, np);
  const std::vector<float>& data = shared[buffer];
  float m[4][8][8];
  for (int64_t w = 0; w < T / 32; ++w) {
    if (warpActive(w, mask, "ldmatrix") == 0) continue;
    for (int lane = 0; lane < 8 * count; ++lane) {
      const int64_t t = w * 32 + lane;
      const int64_t row = evaluate(ld.rowIndex, env[t], &loader);
      if (row % 8 != 0 || row < 0 || row + 8 > static_cast<int64_t>(data.size()))
        raise(fmt::format("kernel {}: lane {} of warp {} supplies ldmatrix row shared {}[{}] (must be a multiple of 8 with 8 "
                          "elements inside its {}: 16-byte aligned rows; index {})", k.name, lane, w, k.shared[buffer].name, row,
                          data.size(), toString(ld.rowIndex)));
      for (int c = 0; c < 8; ++c) {
        checkSharedRead(buffer, row + c, t);
        if (!written[buffer][row + c])
          raise(fmt::format("kernel {}: lane {} of warp {} reads shared {}[{}] that no thread wrote (ldmatrix row, block {})",
                            k.name, lane, w, k.shared[buffer].name, row + c, block));
        m[lane / 8][lane % 8][c] = data[row + c];
      }
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < count; ++j)
        for (int e = 0; e < 2; ++e) {
          const int g = lane / 4, col = 2 * (lane % 4) + e;
          const float v = ld.transpose ? m[j][col][g] : m[j][g][col];
          if (toPairs) pairValues[((w * 32 + lane) * np + toPairs->regs[static_cast<size_t>(j)]) * 2 + e] = v;
          else floats[(w * 32 + lane) * nf + toSlots->slots[static_cast<size_t>(2 * j + e)]] = v;
        }
  }
}

}  // namespace kiln::kernel::interp
