// Constructors of Kernel IR nodes (include/kiln/kernel/ir.h).
#include "kiln/kernel/ir.h"

#include "kiln/support/error.h"

namespace kiln::kernel {
Idx threadIdx() { return idxVar(kThreadIdx, "threadIdx.x"); }
Idx blockIdx() { return idxVar(kBlockIdx, "blockIdx.x"); }

FE fconst(float v) {
  auto e = std::make_shared<FExpr>();
  e->kind = FExpr::Kind::Const;
  e->value = v;
  return e;
}

FE fvar(int slot) {
  KILN_ASSERT(slot >= 0, "float variable slot {} is negative", slot);
  auto e = std::make_shared<FExpr>();
  e->kind = FExpr::Kind::Var;
  e->var = slot;
  return e;
}

FE loadGlobal(int param, Idx index) {
  KILN_ASSERT(param >= 0 && index, "loadGlobal: bad param {} or null index", param);
  auto e = std::make_shared<FExpr>();
  e->kind = FExpr::Kind::LoadGlobal;
  e->param = param;
  e->index = std::move(index);
  return e;
}

FE loadShared(int buffer, Idx index) {
  KILN_ASSERT(buffer >= 0 && index, "loadShared: bad shared buffer {} or null index", buffer);
  auto e = std::make_shared<FExpr>();
  e->kind = FExpr::Kind::LoadShared;
  e->shared = buffer;
  e->index = std::move(index);
  return e;
}

FE fapply(Fn fn, std::vector<FE> args, DType castTo) {
  KILN_ASSERT(static_cast<int>(args.size()) == tensor::arity(fn), "fapply: {} takes {} operands, got {}",
              tensor::fnName(fn), tensor::arity(fn), args.size());
  for (auto& a : args) KILN_ASSERT(a != nullptr, "fapply: null operand of {}", tensor::fnName(fn));
  auto e = std::make_shared<FExpr>();
  e->kind = FExpr::Kind::Apply;
  e->fn = fn;
  e->castTo = castTo;
  e->args = std::move(args);
  return e;
}

Stmt defIdx(int var, std::string name, Idx value) {
  KILN_ASSERT(var > kBlockIdx, "defIdx: variable id {} is reserved or negative", var);
  KILN_ASSERT(value != nullptr, "defIdx {}: null value", name);
  return Stmt::of(Stmt::Kind::DefIdx, op::DefIdx{var, std::move(name), std::move(value)});
}

Stmt elected(Stmt s) {
  if (auto* tma = std::get_if<op::TmaLoad>(&s.op)) tma->elected = true;
  else if (auto* expect = std::get_if<op::MbarrierExpectTx>(&s.op)) expect->elected = true;
  else KILN_ASSERT(false, "elected: only tma.load and expect_tx");
  return s;
}

Stmt defWarpUniform(int var, std::string name, Idx value) {
  Stmt s = defIdx(var, std::move(name), std::move(value));
  s.as<op::DefIdx>().warpUniform = true;
  return s;
}

Stmt assign(int slot, FE value) {
  KILN_ASSERT(slot >= 0 && value, "assign: bad slot {} or null value", slot);
  return Stmt::of(Stmt::Kind::Assign, op::Assign{slot, std::move(value)});
}

Stmt forLoop(int var, std::string name, Idx begin, Idx end, int64_t step, Block body) {
  KILN_ASSERT(var > kBlockIdx, "for: variable id {} is reserved or negative", var);
  KILN_ASSERT(begin && end, "for {}: null bound", name);
  KILN_ASSERT(step > 0, "for {}: step {} must be positive", name, step);
  Stmt s = Stmt::of(Stmt::Kind::For, op::For{var, std::move(name), std::move(begin), std::move(end), step});
  s.body = std::move(body);
  return s;
}

Stmt ifLess(Idx lhs, Idx rhs, Block body) {
  KILN_ASSERT(lhs && rhs, "if: null operand");
  Stmt s = Stmt::of(Stmt::Kind::If, op::If{std::move(lhs), std::move(rhs)});
  s.body = std::move(body);
  return s;
}

Stmt storeGlobal(int param, Idx index, FE value) {
  KILN_ASSERT(param >= 0 && index && value, "storeGlobal: bad param {} or null operand", param);
  return Stmt::of(Stmt::Kind::StoreGlobal, op::StoreGlobal{param, std::move(index), std::move(value)});
}

Stmt storeShared(int buffer, Idx index, FE value) {
  KILN_ASSERT(buffer >= 0 && index && value, "storeShared: bad shared buffer {} or null operand", buffer);
  return Stmt::of(Stmt::Kind::StoreShared, op::StoreShared{buffer, std::move(index), std::move(value)});
}

Stmt barrier() { return Stmt::of(Stmt::Kind::Barrier); }

Stmt counterRelease(int param, Idx index) {
  KILN_ASSERT(param >= 0 && index, "counterRelease: parameter {}", param);
  return Stmt::of(Stmt::Kind::CounterRelease, op::CounterRelease{op::Counter{param, std::move(index)}});
}

Stmt counterAwait(int param, Idx index, Idx count) {
  KILN_ASSERT(param >= 0 && index && count, "counterAwait: parameter {}", param);
  return Stmt::of(Stmt::Kind::CounterAwait, op::CounterAwait{op::Counter{param, std::move(index)}, std::move(count)});
}

Stmt blockTicket(int var, std::string name, int param, Idx index, int64_t blocks) {
  KILN_ASSERT(param >= 0 && index && blocks >= 2, "blockTicket: parameter {}, {} blocks (want 2 or more)", param, blocks);
  KILN_ASSERT(var > kBlockIdx, "blockTicket: variable id {} is reserved or negative", var);
  return Stmt::of(Stmt::Kind::BlockTicket, op::BlockTicket{var, std::move(name), op::Counter{param, std::move(index)}, blocks});
}

Stmt mma(DType operandType, std::vector<int> a, std::vector<int> b, std::vector<int> c) {
  KILN_ASSERT(a.size() == 8 && b.size() == 4 && c.size() == 4, "mma: fragments of {}, {}, {} slots (want 8, 4, 4)", a.size(),
              b.size(), c.size());
  KILN_ASSERT(operandType == DType::BF16 || operandType == DType::F16, "mma: operands must be bf16 or f16, not {}",
              dtypeName(operandType));
  return Stmt::of(Stmt::Kind::Mma, op::Mma{operandType, op::MmaFromSlots{std::move(a), std::move(b)}, std::move(c)});
}

Stmt mmaFromShared(DType operandType, int sharedA, std::vector<Idx> aPairs, int sharedB, std::vector<Idx> bPairs,
                   std::vector<int> c) {
  KILN_ASSERT(aPairs.size() == 4 && bPairs.size() == 2 && c.size() == 4, "mma from shared: {}, {} pairs and {} slots (want 4, 2, 4)",
              aPairs.size(), bPairs.size(), c.size());
  KILN_ASSERT(operandType == DType::BF16 || operandType == DType::F16, "mma: operands must be bf16 or f16, not {}",
              dtypeName(operandType));
  return Stmt::of(Stmt::Kind::Mma, op::Mma{operandType, op::MmaFromShared{sharedA, std::move(aPairs), sharedB, std::move(bPairs)},
                                        std::move(c)});
}

Stmt ldmatrixPairs(int sharedBuf, Idx rowIndex, bool transpose, std::vector<int> regs) {
  KILN_ASSERT(regs.size() == 1 || regs.size() == 2 || regs.size() == 4, "ldmatrix into {} pair registers (want 1, 2 or 4)",
              regs.size());
  Stmt s = ldmatrix(sharedBuf, std::move(rowIndex), static_cast<int>(regs.size()), transpose,
                    std::vector<int>(2 * regs.size(), 0));
  s.as<op::Ldmatrix>().into = op::PairRegs{std::move(regs)};
  return s;
}

Stmt mmaFromPairs(DType operandType, std::vector<int> aRegs, std::vector<int> bRegs, std::vector<int> c) {
  KILN_ASSERT(aRegs.size() == 4 && bRegs.size() == 2 && c.size() == 4, "mma from pair registers: {}, {} and {} (want 4, 2, 4)",
              aRegs.size(), bRegs.size(), c.size());
  KILN_ASSERT(operandType == DType::BF16 || operandType == DType::F16, "mma: operands must be bf16 or f16, not {}",
              dtypeName(operandType));
  return Stmt::of(Stmt::Kind::Mma, op::Mma{operandType, op::MmaFromPairs{std::move(aRegs), std::move(bRegs)}, std::move(c)});
}

Stmt loadVector(int param, Idx index, std::vector<int> slots) {
  const size_t w = slots.size();
  KILN_ASSERT(param >= 0 && index, "loadVector: bad param {} or null index", param);
  KILN_ASSERT(w >= 2 && w <= 8 && (w & (w - 1)) == 0, "loadVector: width {} (want 2, 4 or 8)", w);
  for (int slot : slots) KILN_ASSERT(slot >= 0, "loadVector: negative float slot {}", slot);
  return Stmt::of(Stmt::Kind::LoadVector, op::LoadVector{param, std::move(index), std::move(slots)});
}

Stmt loadSharedVector(int sharedBuf, Idx index, std::vector<int> slots) {
  const size_t w = slots.size();
  KILN_ASSERT(sharedBuf >= 0 && index, "loadSharedVector: bad shared buffer {} or null index", sharedBuf);
  KILN_ASSERT(w == 2 || w == 4 || w == 8, "loadSharedVector: width {} (want 2, 4 or 8)", w);
  for (int slot : slots) KILN_ASSERT(slot >= 0, "loadSharedVector: negative float slot {}", slot);
  return Stmt::of(Stmt::Kind::LoadSharedVector, op::LoadSharedVector{sharedBuf, std::move(index), std::move(slots)});
}

Stmt storeVector(int param, Idx index, std::vector<FE> values) {
  const size_t w = values.size();
  KILN_ASSERT(param >= 0 && index, "storeVector: bad param {} or null index", param);
  KILN_ASSERT(w >= 2 && w <= 8 && (w & (w - 1)) == 0, "storeVector: width {} (want 2, 4 or 8)", w);
  for (auto& v : values) KILN_ASSERT(v != nullptr, "storeVector: null value");
  return Stmt::of(Stmt::Kind::StoreVector, op::StoreVector{param, std::move(index), std::move(values)});
}

Stmt packPair(DType type, int reg, int lo, int hi) {
  KILN_ASSERT(reg >= 0 && lo >= 0 && hi >= 0, "packPair: bad register {} or slots {}, {}", reg, lo, hi);
  return Stmt::of(Stmt::Kind::PackPair, op::PackPair{type, reg, lo, hi});
}

Stmt shuffleXor(int dstSlot, int srcSlot, int laneMask) {
  KILN_ASSERT(dstSlot >= 0 && srcSlot >= 0, "shuffleXor: bad slots {} <- {}", dstSlot, srcSlot);
  KILN_ASSERT(laneMask >= 1 && laneMask <= 16 && (laneMask & (laneMask - 1)) == 0,
              "shuffleXor: lane mask {} (want 1, 2, 4, 8 or 16)", laneMask);
  return Stmt::of(Stmt::Kind::ShuffleXor, op::ShuffleXor{dstSlot, srcSlot, laneMask});
}

Block warpAllReduce(Fn combine, int slot, int tmpSlot) {
  KILN_ASSERT(tensor::arity(combine) == 2, "warpAllReduce: {} is not binary", tensor::fnName(combine));
  KILN_ASSERT(slot != tmpSlot, "warpAllReduce: value and temporary share slot {}", slot);
  Block b;
  for (int m = 16; m >= 1; m /= 2) {
    b.push_back(shuffleXor(tmpSlot, slot, m));
    b.push_back(assign(slot, fapply(combine, {fvar(slot), fvar(tmpSlot)})));
  }
  return b;
}

Stmt cpAsync(int sharedBuf, Idx sharedIndex, int param, Idx globalIndex, int bytes, Idx validBytesOrNull) {
  KILN_ASSERT(sharedBuf >= 0 && param >= 0 && sharedIndex && globalIndex, "cpAsync: bad shared buffer {}, param {} or null index",
              sharedBuf, param);
  KILN_ASSERT(bytes == 4 || bytes == 8 || bytes == 16, "cpAsync: {} bytes (want 4, 8 or 16)", bytes);
  return Stmt::of(Stmt::Kind::CpAsync,
               op::CpAsync{sharedBuf, std::move(sharedIndex), param, std::move(globalIndex), bytes, std::move(validBytesOrNull)});
}

Stmt cpAsyncCommit() { return Stmt::of(Stmt::Kind::CpAsyncCommit); }

namespace {
op::Mbarrier barrierAt(int barriers, Idx index) {
  KILN_ASSERT(barriers >= 0 && index, "mbarrier statement on shared buffer {} or a null index", barriers);
  return op::Mbarrier{barriers, std::move(index)};
}
}  // namespace

Stmt mbarrierInit(int barriers, Idx index, int64_t arrivals) {
  KILN_ASSERT(arrivals >= 1, "mbarrierInit: {} arrivals per phase", arrivals);
  return Stmt::of(Stmt::Kind::MbarrierInit, op::MbarrierInit{barrierAt(barriers, std::move(index)), arrivals});
}
Stmt mbarrierArrive(int barriers, Idx index) {
  return Stmt::of(Stmt::Kind::MbarrierArrive, op::MbarrierArrive{barrierAt(barriers, std::move(index))});
}
Stmt cpAsyncMbarrierArrive(int barriers, Idx index) {
  return Stmt::of(Stmt::Kind::CpAsyncMbarrierArrive, op::CpAsyncMbarrierArrive{barrierAt(barriers, std::move(index))});
}
Stmt namedBarrier(int id, int64_t threads) {
  KILN_ASSERT(id >= 1 && id <= 15 && threads >= 32 && threads % 32 == 0, "namedBarrier: id {} (1..15), {} threads (whole warps)",
              id, threads);
  return Stmt::of(Stmt::Kind::NamedBarrier, op::NamedBarrier{id, threads});
}

Stmt mbarrierArriveExpectTx(int barriers, Idx index, int64_t bytes) {
  KILN_ASSERT(bytes > 0, "mbarrierArriveExpectTx: {} bytes", bytes);
  return Stmt::of(Stmt::Kind::MbarrierExpectTx, op::MbarrierExpectTx{barrierAt(barriers, std::move(index)), bytes});
}

Stmt tmaLoad(int sharedBuf, Idx sharedIndex, int tensorMap, Idx col, Idx row, int barriers, Idx barrierIndex) {
  KILN_ASSERT(sharedBuf >= 0 && tensorMap >= 0 && sharedIndex && col && row, "tmaLoad: shared buffer {}, tensor map {}", sharedBuf,
              tensorMap);
  return Stmt::of(Stmt::Kind::TmaLoad, op::TmaLoad{sharedBuf, std::move(sharedIndex), tensorMap, std::move(col), std::move(row),
                                                barrierAt(barriers, std::move(barrierIndex))});
}

Stmt tmaLoadMulticast(int sharedBuf, Idx sharedIndex, int tensorMap, Idx col, Idx row, int barriers, Idx barrierIndex) {
  Stmt s = tmaLoad(sharedBuf, std::move(sharedIndex), tensorMap, std::move(col), std::move(row), barriers, std::move(barrierIndex));
  s.as<op::TmaLoad>().multicast = true;
  return s;
}

Stmt mbarrierArriveCluster(int barriers, Idx index) {
  return Stmt::of(Stmt::Kind::MbarrierArriveCluster, op::MbarrierArriveCluster{barrierAt(barriers, std::move(index))});
}
Stmt clusterBarrier() { return Stmt::of(Stmt::Kind::ClusterBarrier); }
Stmt fenceMbarrierInit() { return Stmt::of(Stmt::Kind::FenceMbarrierInit); }

Stmt mbarrierWait(int barriers, Idx index, Idx parity) {
  KILN_ASSERT(parity, "mbarrierWait: null parity");
  return Stmt::of(Stmt::Kind::MbarrierWait, op::MbarrierWait{barrierAt(barriers, std::move(index)), std::move(parity)});
}

Stmt cpAsyncWait(int pendingGroups) {
  KILN_ASSERT(pendingGroups >= 0, "cpAsyncWait: {} pending groups", pendingGroups);
  return Stmt::of(Stmt::Kind::CpAsyncWait, op::CpAsyncWait{pendingGroups});
}

Stmt ldmatrix(int sharedBuf, Idx rowIndex, int count, bool transpose, std::vector<int> slots) {
  KILN_ASSERT(sharedBuf >= 0 && rowIndex, "ldmatrix: bad shared buffer {} or null row index", sharedBuf);
  KILN_ASSERT(count == 1 || count == 2 || count == 4, "ldmatrix: {} matrices (want 1, 2 or 4)", count);
  KILN_ASSERT(static_cast<int>(slots.size()) == 2 * count, "ldmatrix.x{}: {} slots (want {})", count, slots.size(), 2 * count);
  for (int slot : slots) KILN_ASSERT(slot >= 0, "ldmatrix: negative float slot {}", slot);
  return Stmt::of(Stmt::Kind::Ldmatrix, op::Ldmatrix{sharedBuf, std::move(rowIndex), transpose, op::FloatSlots{std::move(slots)}});
}

std::pair<int, int> mmaElementA(int lane, int i) {
  int g = lane / 4, t = lane % 4;
  return {g + 8 * ((i / 2) % 2), 2 * t + i % 2 + 8 * (i / 4)};
}

std::pair<int, int> mmaElementB(int lane, int i) {
  int g = lane / 4, t = lane % 4;
  return {2 * t + i % 2 + 8 * (i / 2), g};
}

std::pair<int, int> mmaElementC(int lane, int i) {
  int g = lane / 4, t = lane % 4;
  return {g + 8 * (i / 2), 2 * t + i % 2};
}

Stmt wgmma(DType operandType, int sharedA, Idx aStart, Stmt::CoreMatrices layoutA, int sharedB, Idx bStart,
           Stmt::CoreMatrices layoutB, int64_t n, std::vector<int> acc) {
  KILN_ASSERT(operandType == DType::BF16 || operandType == DType::F16, "wgmma: operands must be bf16 or f16, not {}",
              dtypeName(operandType));
  KILN_ASSERT(n >= 8 && n <= 256 && n % 8 == 0 && static_cast<int64_t>(acc.size()) == n / 2,
              "wgmma: n = {} with {} accumulators (want n a multiple of 8 up to 256, n / 2 accumulators)", n, acc.size());
  KILN_ASSERT(sharedA >= 0 && sharedB >= 0 && aStart && bStart, "wgmma: bad shared buffers {}, {} or null start", sharedA, sharedB);
  return Stmt::of(Stmt::Kind::Wgmma, op::Wgmma{operandType, n, op::SharedMatrix{sharedA, std::move(aStart), layoutA},
                                            op::SharedMatrix{sharedB, std::move(bStart), layoutB}, std::move(acc), nullptr});
}

Stmt wgmmaRegA(DType operandType, std::vector<int> aRegs, int sharedB, Idx bStart, Stmt::CoreMatrices layoutB, int64_t n,
               std::vector<int> acc) {
  KILN_ASSERT(aRegs.size() == 4, "wgmmaRegA: {} A registers (want 4 pairs)", aRegs.size());
  for (int r : aRegs) KILN_ASSERT(r >= 0, "wgmmaRegA: negative pair register {}", r);
  Stmt s = wgmma(operandType, 0, idxConst(0), Stmt::CoreMatrices{}, sharedB, std::move(bStart), layoutB, n, std::move(acc));
  s.as<op::Wgmma>().a = op::PairRegs{std::move(aRegs)};
  return s;
}

Stmt wgmmaFence() { return Stmt::of(Stmt::Kind::WgmmaFence); }
Stmt wgmmaCommit() { return Stmt::of(Stmt::Kind::WgmmaCommit); }
Stmt wgmmaWait(int pendingGroups) {
  KILN_ASSERT(pendingGroups >= 0 && pendingGroups <= 7, "wgmmaWait: {} pending groups (want 0..7)", pendingGroups);
  return Stmt::of(Stmt::Kind::WgmmaWait, op::WgmmaWait{pendingGroups});
}
Stmt fenceProxyAsync() { return Stmt::of(Stmt::Kind::FenceProxyAsync); }

std::pair<int, int> wgmmaElement(int thread, int i) {
  auto [r, c] = mmaElementC(thread % 32, i % 4);
  return {16 * (thread / 32) + r, 8 * (i / 4) + c};
}

int64_t Kernel::sharedBytes() const {
  int64_t bytes = 0;
  for (auto& s : shared)
    if (!s.dynamic) bytes += s.elements * s.elementBytes();
  return bytes;
}

namespace {
constexpr int64_t kDynamicAlignment = 16;  // the widest shared access (16-byte vectors, cp.async, ldmatrix rows)
int64_t alignUp(int64_t v) { return (v + kDynamicAlignment - 1) / kDynamicAlignment * kDynamicAlignment; }
}  // namespace

int64_t Kernel::dynamicSharedOffset(int buffer) const {
  KILN_ASSERT(buffer >= 0 && buffer < static_cast<int>(shared.size()) && shared[buffer].dynamic,
              "kernel {}: shared buffer #{} is not a dynamic shared buffer", name, buffer);
  int64_t offset = 0;
  for (int i = 0; i < buffer; ++i)
    if (shared[i].dynamic) offset = alignUp(offset + shared[i].elements * shared[i].elementBytes());
  return offset;
}

int64_t Kernel::groupSharedBytes() const {
  constexpr int64_t a = Target::kTmaSharedAlignment;  // each group's buffers align as one block's
  return groups > 1 ? (dynamicSharedBytes + a - 1) / a * a : dynamicSharedBytes;
}

int64_t Kernel::dynamicBuffersBytes() const {
  int64_t end = 0;
  for (int i = 0; i < static_cast<int>(shared.size()); ++i)
    if (shared[i].dynamic) end = dynamicSharedOffset(i) + shared[i].elements * shared[i].elementBytes();
  return end;
}

FE fselect(Idx lhs, Idx bound, FE a, FE b) {
  auto e = std::make_shared<FExpr>();
  e->kind = FExpr::Kind::Select;
  e->index = std::move(lhs);
  e->bound = std::move(bound);
  e->args = {std::move(a), std::move(b)};
  return e;
}

}  // namespace kiln::kernel
