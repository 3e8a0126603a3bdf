// The Kernel IR verifier's checks of the asynchronous copies and the tensor cores' shared-memory operands: mbarriers,
// cp.async, ldmatrix, wgmma (the rules in verifier.cpp's header).
#include <fmt/format.h>

#include "kiln/kernel/ir.h"
#include "kiln/kernel/operand_layout.h"
#include "verifier_roles.h"
#include "verifier_state.h"

namespace kiln::kernel::detail {

void Verifier::checkMbarrier(const Stmt& st, const Scope& s) {
  const op::Mbarrier& barrier = *op::mbarrierOf(st.op);
  checkIdx(barrier.index, s, "an mbarrier index");
  if (!p.target.cpAsync) fail("mbarrier on {}, which does not have it (sm_80 and later)", p.target.arch);
  checkSharedIndex(barrier.buffer, barrier.index, s, "mbarrier");
  const int64_t threads = k.block[0] * k.block[1] * k.block[2];
  if (auto* init = std::get_if<op::MbarrierInit>(&st.op); init && (init->arrivals < 1 || init->arrivals > threads))
    fail("mbarrier.init with {} arrivals per phase in a block of {} threads", init->arrivals, threads);
  if (auto* expect = std::get_if<op::MbarrierExpectTx>(&st.op);
      expect && (!p.target.tma || expect->bytes < 1 || expect->bytes >= (1 << 20)))
    fail("mbarrier.arrive.expect_tx of {} bytes on {} (sm_90+, 1 to 2^20 - 1 bytes)", expect->bytes, p.target.arch);
  auto* wait = std::get_if<op::MbarrierWait>(&st.op);
  if (!wait) return;
  checkIdx(wait->parity, s, "an mbarrier parity");
  if (auto r = bound(wait->parity, s); s.reachable && r && (r->first < 0 || r->second > 1))
    fail("mbarrier.wait for parity {} in [{}, {}] (want 0 or 1)", toString(wait->parity), r->first, r->second);
}

void Verifier::checkCpAsync(const Stmt& stmt, const Scope& s) {
  const auto& st = stmt.as<op::CpAsync>();
  checkIdx(st.sharedIndex, s, "a cp.async shared index");
  checkIdx(st.globalIndex, s, "a cp.async global index");
  if (st.validBytes) checkIdx(st.validBytes, s, "cp.async valid bytes");
  if (!p.target.cpAsync) fail("cp.async on {}, which does not have it", p.target.arch);
  if (st.bytes != 4 && st.bytes != 8 && st.bytes != 16) fail("cp.async of {} bytes (want 4, 8 or 16)", st.bytes);
  if (st.param < 0 || st.param >= static_cast<int>(k.params.size()))
    fail("cp.async from parameter #{} of {}", st.param, k.params.size());
  if (st.shared < 0 || st.shared >= static_cast<int>(k.shared.size()))
    fail("cp.async into shared buffer #{} of {}", st.shared, k.shared.size());
  const Param& prm = k.params[st.param];
  const SharedBuffer& sb = k.shared[st.shared];
  if (prm.dtype != sb.dtype || st.bytes % dtypeBytes(sb.dtype) != 0)
    fail("cp.async{} copies {} {} into shared {} of {} (same dtype, whole elements)", st.bytes, dtypeName(prm.dtype), prm.name,
         sb.name, dtypeName(sb.dtype));
  const int64_t n = st.bytes / dtypeBytes(sb.dtype);
  VarExtents extents{{kThreadIdx, k.block[0]}, {kBlockIdx, k.grid[0]}};
  for (const Idx& at : {st.sharedIndex, st.globalIndex})
    if (!provablyMultipleOf(expand(at, s), n, extents))
      fail("cp.async not provably aligned: cp.async{} shared {}[{}] <- {}[{}] needs indices that are multiples of {} (index {} "
           "expanded: {})", st.bytes, sb.name, toString(st.sharedIndex), prm.name, toString(st.globalIndex), n, toString(at),
           toString(expand(at, s)));
  checkSharedIndex(st.shared, st.sharedIndex, s, "cp.async into");
  checkSharedIndex(st.shared, st.sharedIndex + idxConst(n - 1), s, "cp.async into");
  if (!s.reachable) return;
  if (st.validBytes) {
    if (auto r = bound(st.validBytes, s); r && (r->first < 0 || r->second > st.bytes))
      fail("cp.async{} valid bytes {} range over [{}, {}], outside 0..{}", st.bytes, toString(st.validBytes), r->first, r->second,
           st.bytes);
  } else if (auto r = bound(st.globalIndex, s); r && (r->first < 0 || r->second + n > prm.elements)) {
    fail("cp.async{} reads {}[{}] over elements [{}, {}], outside the parameter's {} elements", st.bytes, prm.name,
         toString(st.globalIndex), r->first, r->second + n - 1, prm.elements);
  }
}

void Verifier::checkLdmatrix(const Stmt& st, const Scope& s) {
  const auto& ld = st.as<op::Ldmatrix>();
  const auto* regs = std::get_if<op::PairRegs>(&ld.into);
  const auto* slots = std::get_if<op::FloatSlots>(&ld.into);
  checkWarpCollective("ldmatrix");
  checkIdx(ld.rowIndex, s, "an ldmatrix row index");
  if (!p.target.ldmatrix) fail("ldmatrix on {}, which does not have it", p.target.arch);
  const size_t n = regs ? 2 * regs->regs.size() : slots->slots.size();
  if (n != 2 && n != 4 && n != 8) fail("ldmatrix with {} slots (want 2, 4 or 8)", n);
  if (ld.shared < 0 || ld.shared >= static_cast<int>(k.shared.size()))
    fail("ldmatrix from shared buffer #{} of {}", ld.shared, k.shared.size());
  const SharedBuffer& sb = k.shared[ld.shared];
  if (sb.dtype != DType::BF16 && sb.dtype != DType::F16) fail("ldmatrix from shared {} of type {} (want bf16 or f16)", sb.name,
                                                              dtypeName(sb.dtype));
  VarExtents extents{{kThreadIdx, k.block[0]}, {kBlockIdx, k.grid[0]}};
  if (!provablyMultipleOf(expand(ld.rowIndex, s), 8, extents))
    fail("ldmatrix row not provably aligned: shared {}[{}] must be a multiple of 8 elements (16 bytes; expanded: {})", sb.name,
         toString(ld.rowIndex), toString(expand(ld.rowIndex, s)));
  checkSharedIndex(ld.shared, ld.rowIndex, s, "ldmatrix row");
  checkSharedIndex(ld.shared, ld.rowIndex + idxConst(7), s, "ldmatrix row");
  if (slots)
    for (int slot : slots->slots) checkSlotWrite(slot, "ldmatrix");
  if (regs) checkPairRegs(regs->regs, true, "ldmatrix into");
}

void Verifier::checkWgmma(const Stmt& st, const Scope& s) {
  const auto& wg = st.as<op::Wgmma>();
  checkWarpCollective("wgmma", kWarpgroupThreads);
  if (wg.scaleD) {
    checkIdx(wg.scaleD, s, "a wgmma's scale-d");
    if (varies(wg.scaleD, s)) fail("wgmma scale-d {} varies between threads (one value a warpgroup)", toString(wg.scaleD));
  }
  if (!p.target.wgmma) fail("wgmma on {}, which does not have it (sm_90a only)", p.target.arch);
  if (wg.n < 8 || wg.n > 256 || wg.n % 8 != 0 || static_cast<int64_t>(wg.acc.size()) != wg.n / 2)
    fail("wgmma m64n{}k16 with {} accumulators (want n a multiple of 8 up to 256 and n / 2 accumulators)", wg.n, wg.acc.size());
  VarExtents extents{{kThreadIdx, k.block[0]}, {kBlockIdx, k.grid[0]}};
  constexpr int64_t kGroup = kWgmmaOperandSwizzle.atom();  // 8 swizzled rows of 64: 512 elements
  auto operand = [&](const op::SharedMatrix& m, int64_t rows, const char* which) {
    const int buffer = m.buffer;
    const Idx& start = m.start;
    const op::CoreMatrices& layout = m.layout;
    checkIdx(start, s, "a wgmma start");
    if (buffer < 0 || buffer >= static_cast<int>(k.shared.size())) fail("wgmma {} from shared buffer #{} of {}", which, buffer, k.shared.size());
    const SharedBuffer& sb = k.shared[buffer];
    if (sb.dtype != wg.operandType)
      fail("wgmma.{} reads {} from shared {} of type {}", dtypeName(wg.operandType), which, sb.name, dtypeName(sb.dtype));
    if (layout.swizzle128 && layout.mnMajor) {
      if (dtypeBytes(sb.dtype) != 2 || layout.kStride != kGroup || (rows > 64 && (layout.rowStride <= 0 || layout.rowStride % kGroup != 0)))
        fail("wgmma {} MN-major with the 128-byte swizzle reads {} with k stride {} and row stride {} (want 16-bit elements, "
             "8 rows of 64: 512, and blocks of 64 n a positive multiple of 512 apart)", which, dtypeName(sb.dtype), layout.kStride,
             layout.rowStride);
      if (!sb.dynamic || k.dynamicSharedOffset(buffer) % kSwizzle128AtomBytes != 0)
        fail("wgmma {} with the 128-byte swizzle reads shared {}, which is not a 1024-byte aligned dynamic buffer", which, sb.name);
      if (!provablyMultipleOf(expand(start, s), kGroup, extents))
        fail("wgmma {} MN-major swizzled start shared {}[{}] not provably a multiple of 512 elements (an 8-row group)", which,
             sb.name, toString(start));
    } else if (layout.swizzle128) {
      if (dtypeBytes(sb.dtype) != 2 || layout.rowStride != kGroup)
        fail("wgmma {} with the 128-byte swizzle reads {} with row stride {} (want 16-bit elements, 8 rows of 64: 512)", which,
             dtypeName(sb.dtype), layout.rowStride);
      if (!sb.dynamic || k.dynamicSharedOffset(buffer) % kSwizzle128AtomBytes != 0)
        fail("wgmma {} with the 128-byte swizzle reads shared {}, which is not a 1024-byte aligned dynamic buffer", which, sb.name);
    } else if (layout.kStride <= 0 || layout.rowStride <= 0 || layout.kStride % 8 != 0 || layout.rowStride % 8 != 0) {
      fail("wgmma {} core-matrix strides k {} row {} (want positive multiples of 8 elements)", which, layout.kStride, layout.rowStride);
    }
    if (!provablyMultipleOf(expand(start, s), 8, extents))
      fail("wgmma {} start shared {}[{}] not provably a multiple of 8 elements (16 bytes; expanded: {})", which, sb.name,
           toString(start), toString(expand(start, s)));
    checkSharedIndex(buffer, start, s, "wgmma operand");
    const int64_t last = layout.swizzle128 && layout.mnMajor ? ((rows - 1) / 64) * layout.rowStride + layout.kStride + 7 * 64 + 63
                         : layout.swizzle128                 ? (rows / 8 - 1) * layout.rowStride + 7 * 64 + kWgmmaK - 1
                                                             : (rows / 8 - 1) * layout.rowStride + layout.kStride + 63;
    checkSharedIndex(buffer, start + idxConst(last), s, "wgmma operand");
  };
  if (const auto* a = std::get_if<op::SharedMatrix>(&wg.a)) {
    if (a->layout.mnMajor) fail("wgmma A from shared {} as MN-major core matrices (only B may be)", k.shared[a->buffer].name);
    operand(*a, kWgmmaM, "A");
  } else if (const auto& regs = std::get<op::PairRegs>(wg.a).regs; regs.size() != 4) {
    fail("wgmma with A from {} pair registers (want 4)", regs.size());
  } else {
    checkPairRegs(regs, false, "wgmma A from");
  }
  operand(wg.b, wg.n, "B");
  for (int slot : wg.acc) checkSlotRead(slot, "wgmma");
}

}  // namespace kiln::kernel::detail
