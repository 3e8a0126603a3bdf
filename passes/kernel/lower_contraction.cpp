// kernel-lower-from-tile for TiledContraction schedules (kernel_builder.h).
#include <fmt/format.h>

#include <optional>

#include "kernel_builder.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

// A block per output tile of a matrix product (tile/contraction.h). Block b: tile column tn = b mod tilesN,
// tile row tm = (b div tilesN) mod tilesM, the other output axes from b div (tilesM*tilesN). Per step of tile_k,
// every operand slice is copied into shared memory (tile::sliceSlot's layouts; zeros outside the matrix), a
// barrier, the block multiplies, a barrier; with copy register_prefetch the copy goes through registers loaded a
// step ahead.
// The multiplication and the epilogue are per thread on CUDA cores (multiplyOnCudaCores) or per warp on
// tensor cores (multiplyOnTensorCores, instruction mma.sync, either shared layout).
void KernelBuilder::tiledContraction(const tile::TiledContraction& s) {
  Tiling t;
  t.c = tile::contractionOf(s, lk_);
  t.s = s;
  using Instruction = tile::TiledContraction::Instruction;
  const int64_t threads = tile::threadsPerBlock(s);
  const int64_t tilesM = tile::tilesM(s, t.c), tilesN = tile::tilesN(s, t.c);
  t.mAxis = lk_.parallel[static_cast<size_t>(t.c.mAxis)];
  t.nAxis = lk_.parallel[static_cast<size_t>(t.c.nAxis)];
  k_.block = {threads, 1, 1};
  k_.grid = {tile::gridBlocks(s, lk_), 1, 1};
  extents_[kThreadIdx] = threads;
  extents_[kBlockIdx] = k_.grid[0];
  if (s.streamBlocks > 0) {  // stream-K: each step's unit defines them where it is used (lower_contraction_stream_k.cpp)
    t.tileN = idxVar(freshKernelVar(), "tn");
    t.tileM = idxVar(freshKernelVar(), "tm");
    extents_[t.tileN->var] = tilesN;
    extents_[t.tileM->var] = tilesM;
  } else if (s.multicastB) {  // clusters of C blocks consecutive in m: block b takes tile (C ((b / C) div tiles_n) + b mod C, (b / C) mod tiles_n)
    const int64_t C = s.cluster;
    const Idx pair = floorDiv(blockIdx(), C);
    t.tileN = defVar(k_.body, "tn", mod(pair, tilesN), tilesN);
    t.tileM = defVar(k_.body, "tm", simplify(mod(floorDiv(pair, tilesN), tilesM / C) * idxConst(C) + mod(blockIdx(), C), extents_), tilesM);
  } else {
    const Idx block = blockIdx();
    t.tileN = defVar(k_.body, "tn", mod(block, tilesN), tilesN);
    t.tileM = defVar(k_.body, "tm", mod(floorDiv(block, tilesN), tilesM), tilesM);
  }
  std::vector<loop::Axis> outer;
  for (size_t d = 0; d < lk_.parallel.size(); ++d)
    if (static_cast<int>(d) != t.c.mAxis && static_cast<int>(d) != t.c.nAxis) outer.push_back(lk_.parallel[d]);
  unflatten(outer, floorDiv(blockIdx(), tilesM * tilesN), t.c.outerPoints, k_.body);
  const size_t tileWork = k_.body.size();  // what a block of a tile without its matrix's rows skips (readOnlyAt)
  const bool dynamic = tile::dynamicShared(s);  // a ring of pipelineDepth slices per operand
  // Pipelined products copy an A that several stages share once (tile::aSources); the others stage every A.
  std::vector<size_t> aSource = tile::aSources(t.c);
  if (!dynamic)
    for (size_t st = 0; st < aSource.size(); ++st) aSource[st] = st;
  for (size_t st = 0; st < lk_.stages.size(); ++st) {
    if (aSource[st] != st) {
      t.sharedA.push_back(t.sharedA[aSource[st]]);
    } else {
      t.sharedA.push_back(static_cast<int>(k_.shared.size()));
      k_.shared.push_back(SharedBuffer{fmt::format("a{}", st), s.pipelineDepth * tile::sliceElements(s.a, s.tileM, s.tileK),
                                       tile::sliceType(s, s.a), dynamic});
    }
    if (s.stackedB && st > 0) {  // one buffer "b" whose ring slots hold every stage's B slice
      t.sharedB.push_back(t.sharedB[0]);
      continue;
    }
    t.sharedB.push_back(static_cast<int>(k_.shared.size()));
    const int64_t stacked = s.stackedB ? static_cast<int64_t>(lk_.stages.size()) : 1;
    k_.shared.push_back(SharedBuffer{s.stackedB ? std::string("b") : fmt::format("b{}", st),
                                     stacked * s.pipelineDepth * tile::sliceElements(s.b, s.tileN, s.tileK), tile::sliceType(s, s.b),
                                     dynamic});
  }
  if (dynamic) k_.dynamicSharedBytes = k_.dynamicBuffersBytes();
  // Thread coordinates and accumulators (zeroed) come first; the reduction loop then stages and multiplies.
  Block steps;
  int kStepVar = freshKernelVar();
  t.k0 = idxVar(kStepVar, "k0");
  extents_[kStepVar] = t.c.k;
  std::function<void(Block&)> multiply = s.instruction == Instruction::MmaSync ? multiplyOnTensorCores(t)
                                         : s.instruction == Instruction::Wgmma ? multiplyOnWarpgroups(t)
                                         : s.a.layout == tile::TiledContraction::SharedLayout::RowsF32 ? multiplyOnCudaCoresStreamed(t)
                                                                                                      : multiplyOnCudaCores(t);
  std::vector<OperandSlice> operands;  // per stage, A then B
  for (size_t st = 0; st < lk_.stages.size(); ++st) {
    const loop::Axis& kAxis = lk_.stages[st].axes[0];
    if (aSource[st] == st) operands.push_back({t.c.stages[st].a, t.mAxis, kAxis, t.c.m, s.tileM, t.tileM, t.sharedA[st], &t.s.a});
    operands.push_back({t.c.stages[st].b, t.nAxis, kAxis, t.c.n, s.tileN, t.tileN, t.sharedB[st], &t.s.b});
    if (s.stackedB) {
      const int64_t slice = tile::sliceElements(s.b, s.tileN, s.tileK);
      operands.back().slotStride = slice * static_cast<int64_t>(lk_.stages.size());
      operands.back().slotOffset = slice * static_cast<int64_t>(st);
    }
  }
  if (s.streamBlocks > 0) t.epilogue = contractionEpilogue(t);  // run inside the k loop, where a tile's walk ends
  using Copy = tile::TiledContraction::Copy;
  const bool ring = s.a.copy == Copy::CpAsync || s.a.copy == Copy::Tma;
  if (s.a.copy == Copy::Tma) {
    tmaSteps(t, operands, multiply);
  } else if (s.a.copy == Copy::CpAsync) {
    pipelinedSteps(t, operands, multiply);
  } else if (s.a.copy == Copy::RegisterPrefetch) {
    // Registers hold the next slice while the block multiplies this one: store, barrier, load the next slice
    // (in flight during the multiplication), multiply, barrier. The first slice is loaded before the loop.
    std::vector<Prefetched> prefetch;
    for (const OperandSlice& o : operands) prefetch.push_back(prefetched(t, o));
    for (const Prefetched& o : prefetch) loadSlice(t, o, idxConst(0), k_.body);
    for (const Prefetched& o : prefetch) storeSlice(t, o, steps);
    steps.push_back(barrier());
    for (const Prefetched& o : prefetch) loadSlice(t, o, simplify(t.k0 + idxConst(t.s.tileK), extents_), steps);
  } else {
    for (const OperandSlice& o : operands) stageOperand(t, o, steps);
    steps.push_back(barrier());
  }
  if (!ring) {
    multiply(steps);
    steps.push_back(barrier());  // everyone is done with the slices before the next step overwrites them
    k_.body.push_back(forLoop(kStepVar, "k0", idxConst(0), idxConst(t.c.k), t.s.tileK, std::move(steps)));
  }
  if (s.streamBlocks == 0) {
    Block epilogue = contractionEpilogue(t);
    if (!s.producerWarp) {
      k_.body.insert(k_.body.end(), epilogue.begin(), epilogue.end());
    } else {  // the producer warp holds no outputs (its row index would name the next tile's rows)
      k_.body.push_back(ifLess(t.role, idxConst(s.tileM / kWgmmaM), std::move(epilogue)));
    }
  }
  if (lk_.readOnlyAt) {
    KILN_ASSERT(s.streamBlocks == 0 && t.c.mAxis == lk_.readOnlyAt->rowAxis, "kernel {}: a product read only at its rows' matrices is "
                "tiled along its row axis, without stream-K", lk_.name);
    skipTilesOfOtherGroups(t, tileWork);
  }
}

// The rows of tile tm, [tm * tile_m, min((tm + 1) * tile_m, m)), hold the groups group(first) .. group(last): the group
// is nondecreasing along the rows (loop::ReadOnlyAt). Two reads of the group tell a block whether its matrix e is one
// of them; where it is not, nothing the block would compute is ever read, and the block does nothing. The condition is
// the same for every thread of the block, so the barriers inside stay block-wide.
void KernelBuilder::skipTilesOfOtherGroups(const Tiling& t, size_t from) {
  const loop::ReadOnlyAt& r = *lk_.readOnlyAt;
  const int rowVar = lk_.parallel[static_cast<size_t>(r.rowAxis)].var + kFirstLoopVar;
  const loop::Axis& matrix = lk_.parallel[0];
  const Idx group = shifted(r.group);
  auto groupAt = [&](const Idx& row) {
    return simplify(substitute(group, [&](int v, const std::string&) { return v == rowVar ? row : nullptr; }), extents_);
  };
  const Idx first = simplify(t.tileM * idxConst(t.s.tileM), extents_);
  const Idx last = simplify(idxMin(idxAdd(first, t.s.tileM - 1), idxConst(t.c.m - 1)), extents_);
  const Idx e = idxVar(matrix.var + kFirstLoopVar, matrix.name);
  Block work(std::make_move_iterator(k_.body.begin() + static_cast<std::ptrdiff_t>(from)), std::make_move_iterator(k_.body.end()));
  k_.body.erase(k_.body.begin() + static_cast<std::ptrdiff_t>(from), k_.body.end());
  // group(first) <= e <= group(last)
  k_.body.push_back(ifLess(groupAt(first), idxAdd(e, 1), Block{ifLess(e, idxAdd(groupAt(last), 1), std::move(work))}));
}

// The epilogue, once per owned output: m and n defined, each stage's total in its accumulator.
Block KernelBuilder::contractionEpilogue(Tiling& t) {
  const tile::TiledContraction& s = t.s;
  accs_.assign(lk_.stages.size(), -1);
  extents_[t.mAxis.var + kFirstLoopVar] = t.c.m;
  extents_[t.nAxis.var + kFirstLoopVar] = t.c.n;
  const bool pairs = pairedStores(t);
  // With a producer warp the epilogue runs on the warpgroups alone (wg below their count): its guards may know that.
  std::optional<std::pair<int, int64_t>> roleExtent;
  if (s.producerWarp && t.role && t.role->op == IndexNode::Op::Var) {
    roleExtent = {t.role->var, extents_[t.role->var]};
    extents_[t.role->var] = s.tileM / kWgmmaM;
  }
  Block epilogue;
  for (size_t i = 0; i < t.owned.size(); ++i) {
    const Owned& o = t.owned[i];
    Block store;
    store.push_back(defIdx(t.mAxis.var + kFirstLoopVar, t.mAxis.name, o.row));
    if (pairs && i + 1 < t.owned.size() && sameIdx(t.owned[i + 1].row, o.row) &&
        sameIdx(simplify(t.owned[i + 1].col + idxMul(o.col, -1), extents_), idxConst(1))) {
      storePair(t, o, t.owned[i + 1], store);
      ++i;
    } else {
      store.push_back(defIdx(t.nAxis.var + kFirstLoopVar, t.nAxis.name, o.col));
      for (size_t st = 0; st < lk_.stages.size(); ++st) accs_[st] = o.acc[st];
      storeResult(store);
    }
    epilogue.push_back(guardBelow(o.row, t.c.m, Block{guardBelow(o.col, t.c.n, std::move(store))}));
  }
  if (roleExtent) extents_[roleExtent->first] = roleExtent->second;
  return epilogue;
}

// wgmma products store the two outputs a thread holds in adjacent columns (2t, 2t + 1 of each 8) with one vector store
// when the output is contiguous along n and n is even (a pair never straddles the matrix's last column): half the store
// instructions, and each quad of lanes fills whole 32-byte sectors of f32 partial sums.
bool KernelBuilder::pairedStores(const Tiling& t) {
  if (t.s.instruction != tile::TiledContraction::Instruction::Wgmma || t.c.n % 2 != 0) return false;
  const loop::Buffer& out = tp_.loop.buffers[static_cast<size_t>(lk_.output)];
  if (out.dtype != DType::F32 && out.dtype != DType::BF16 && out.dtype != DType::F16) return false;
  int64_t stride = 1;  // the output's stride along n
  for (size_t d = static_cast<size_t>(t.c.nAxis) + 1; d < out.shape.size(); ++d) stride *= out.shape[d];
  return stride == 1 && out.shape.size() == lk_.parallel.size();
}

// Outputs a and b of one row, b in the next column: each stage's result computed in a scope of its own (the column
// variable is defined once per scope), then both written by one vector store at a's column (`store` defines the row).
void KernelBuilder::storePair(const Tiling& t, const Owned& a, const Owned& b, Block& store) {
  const int nVar = t.nAxis.var + kFirstLoopVar;
  const bool column = loop::usesVar(*lk_.result, t.nAxis.var);  // the result reads the column
  std::vector<FE> values;
  for (const Owned* o : {&a, &b}) {
    Block part;
    if (column) part.push_back(defIdx(nVar, t.nAxis.name, o->col));
    for (size_t st = 0; st < lk_.stages.size(); ++st) accs_[st] = o->acc[st];
    int& v = pairSlots_[values.size()];
    if (v < 0) v = slot(fmt::format("e{}", values.size()));
    Cse cse;
    FE value = lower(storedResult(), part, cse);
    part.push_back(assign(v, value));
    if (column) store.push_back(ifLess(idxConst(0), idxConst(1), std::move(part)));  // a scope for the column variable
    else store.insert(store.end(), part.begin(), part.end());
    values.push_back(fvar(v));
  }
  // The guards again, on the variables: the verifier bounds the vector's elements by its variables' ranges (dropped
  // where the tiles divide the matrix: the definitions bound them).
  const int mVar = t.mAxis.var + kFirstLoopVar;
  store.push_back(defIdx(nVar, t.nAxis.name, a.col));
  const bool rowsInside = below(a.row, t.c.m), pairInside = below(a.col, t.c.n - 1);
  Block vector{kernel::storeVector(0, outputIndex(), std::move(values))};
  if (!pairInside) vector = Block{ifLess(idxVar(nVar, t.nAxis.name), idxConst(t.c.n - 1), std::move(vector))};
  if (!rowsInside) vector = Block{ifLess(idxVar(mVar, t.mAxis.name), idxConst(t.c.m), std::move(vector))};
  store.insert(store.end(), vector.begin(), vector.end());
}

// Every value lhs takes over the extents is below bound (false where that is not proven).
bool KernelBuilder::below(const Idx& lhs, int64_t bound) {
  auto range = idxRange(simplify(lhs, extents_), extents_);
  return range && range->second < bound;
}

// The epilogue's guards: tiles that divide the matrix need none (nvcc keeps a comparison and a predicate per output
// otherwise, the range of blockIdx % tiles being unknown to it).
Stmt KernelBuilder::guardBelow(const Idx& lhs, int64_t bound, Block body) {
  if (below(lhs, bound)) return ifLess(idxConst(0), idxConst(1), std::move(body));  // a scope of its own
  return ifLess(lhs, idxConst(bound), std::move(body));
}

// Where element (kk, rr) of operand o's slice lies (tile::sliceSlot's layout), simplified.
Idx KernelBuilder::sliceSlot(const Tiling& t, const OperandSlice& o, const Idx& kk, const Idx& rr) {
  return simplify(tile::sliceSlot(*o.staging, kk, rr, o.rows, t.s.tileK), extents_);
}

// The operand's value at slice row rr and k = kStart + kk, handed to `sink` (a store or an assignment) under the
// guards row < rowExtent and k < K: nothing is read outside the matrix.
Stmt KernelBuilder::guardedOperandLoad(const Tiling& t, const OperandSlice& o, const Idx& rr, const Idx& kk, const Idx& kStart,
                        const std::function<Stmt(FE)>& sink) {
  Block inside;
  Idx row = simplify(o.tileIdx * idxConst(o.rows) + rr, extents_), kAt = simplify(kStart + kk, extents_);
  inside.push_back(defIdx(o.rowAxis.var + kFirstLoopVar, o.rowAxis.name, row));
  extents_[o.rowAxis.var + kFirstLoopVar] = o.rowExtent;
  inside.push_back(defIdx(o.kAxis.var + kFirstLoopVar, o.kAxis.name, kAt));
  extents_[o.kAxis.var + kFirstLoopVar] = t.c.k;
  std::map<std::string, FE> cse;
  FE v = lower(o.value, inside, cse);
  inside.push_back(sink(v));
  return ifLess(row, idxConst(o.rowExtent), Block{ifLess(kAt, idxConst(t.c.k), std::move(inside))});
}

// Copies the operand's slice at k in [k0, k0 + tk) into its shared buffer (zeros outside the matrix).
void KernelBuilder::stageOperand(const Tiling& t, const OperandSlice& o, Block& out) {
  const int64_t threads = k_.block[0];
  int flatVar = freshKernelVar();
  Idx flat = idxVar(flatVar, "e");
  extents_[flatVar] = o.rows * t.s.tileK;
  Block body;
  Idx kk = defVar(body, "kk", mod(flat, t.s.tileK), t.s.tileK);
  Idx rr = defVar(body, "rr", floorDiv(flat, t.s.tileK), o.rows);
  Idx slotIdx = sliceSlot(t, o, kk, rr);
  body.push_back(storeShared(o.buf, slotIdx, fconst(0.f)));
  body.push_back(guardedOperandLoad(t, o, rr, kk, t.k0, [&](FE v) { return storeShared(o.buf, slotIdx, v); }));
  out.push_back(forLoop(flatVar, "e", threadIdx(), idxConst(o.rows * t.s.tileK), threads, std::move(body)));
}

// One operand slice staged through registers (copy register_prefetch): thread t holds elements e = t + i * threads
// of the rows x tile_k slice, element e being k offset e mod tile_k of row e div tile_k (as stageOperand copies them).
KernelBuilder::Prefetched KernelBuilder::prefetched(const Tiling& t, const OperandSlice& operand) {
  const int64_t threads = k_.block[0], total = operand.rows * t.s.tileK;
  Prefetched o{operand, {}, total % threads != 0};
  for (int64_t i = 0; i * threads < total; ++i) {
    Idx flat = simplify(threadIdx() + idxConst(i * threads), extents_);
    Idx kk = defVar(k_.body, fmt::format("pk{}_{}", operand.buf, i), mod(flat, t.s.tileK), t.s.tileK);
    Idx rr = defVar(k_.body, fmt::format("pr{}_{}", operand.buf, i), floorDiv(flat, t.s.tileK), ((i + 1) * threads - 1) / t.s.tileK + 1);
    o.elements.push_back({kk, rr, slot(fmt::format("p{}_{}", operand.buf, i))});
  }
  return o;
}

// e < rows * tile_k, said as rr < rows (kk < tile_k always): a variable bound the verifier can narrow on.
Stmt KernelBuilder::insideSlice(const Prefetched& o, const Prefetched::Element& el, Stmt s) {
  return o.partial ? ifLess(el.rr, idxConst(o.operand.rows), Block{std::move(s)}) : s;
}

// Loads the slice starting at k = kStart into the registers (zeros outside the matrix and past k).
void KernelBuilder::loadSlice(const Tiling& t, const Prefetched& o, const Idx& kStart, Block& out) {
  for (const auto& el : o.elements) {
    out.push_back(assign(el.reg, fconst(0.f)));
    out.push_back(insideSlice(o, el, guardedOperandLoad(t, o.operand, el.rr, el.kk, kStart,
                                                        [&](FE v) { return assign(el.reg, v); })));
  }
}

// Writes the registers into the shared slice (sliceSlot's layout, as stageOperand).
void KernelBuilder::storeSlice(const Tiling& t, const Prefetched& o, Block& out) {
  for (const auto& el : o.elements)
    out.push_back(insideSlice(o, el, storeShared(o.operand.buf, sliceSlot(t, o.operand, el.kk, el.rr), fvar(el.reg))));
}

// The zeroed accumulators acc[stage][i * micro_n + j] of thread (tx, ty) of the gx x gy thread grid, which owns rows
// ty + i gy and columns tx + j gx of the tile (entered in t.owned). Both CUDA-core multiplications use it.
std::vector<std::vector<int>> KernelBuilder::cudaCoreAccumulators(Tiling& t, const Idx& tx, const Idx& ty) {
  const int64_t um = t.s.microM, un = t.s.microN, gx = t.s.tileN / un, gy = t.s.tileM / um;
  std::vector<std::vector<int>> acc(lk_.stages.size());
  for (size_t st = 0; st < lk_.stages.size(); ++st)
    for (int64_t i = 0; i < um; ++i)
      for (int64_t j = 0; j < un; ++j) {
        acc[st].push_back(slot(fmt::format("acc{}_{}_{}", st, i, j)));
        k_.body.push_back(assign(acc[st].back(), fconst(0.f)));
      }
  for (int64_t i = 0; i < um; ++i)
    for (int64_t j = 0; j < un; ++j) {
      Owned o{simplify(t.tileM * idxConst(t.s.tileM) + ty + idxConst(i * gy), extents_),
              simplify(t.tileN * idxConst(t.s.tileN) + tx + idxConst(j * gx), extents_), {}};
      for (size_t st = 0; st < lk_.stages.size(); ++st) o.acc.push_back(acc[st][static_cast<size_t>(i * un + j)]);
      t.owned.push_back(std::move(o));
    }
  return acc;
}

// CUDA cores: thread (tx, ty) = (t mod TX, t div TX) owns rows ty + i*TY and columns tx + j*TX of the tile (TY x TX
// threads, micro_m x micro_n outputs each), so neighbouring threads touch neighbouring columns.
std::function<void(Block&)> KernelBuilder::multiplyOnCudaCores(Tiling& t) {
  const int64_t um = t.s.microM, un = t.s.microN, gx = t.s.tileN / un, gy = t.s.tileM / um;
  Idx tx = defVar(k_.body, "tx", mod(threadIdx(), gx), gx);
  Idx ty = defVar(k_.body, "ty", floorDiv(threadIdx(), gx), gy);
  std::vector<std::vector<int>> acc = cudaCoreAccumulators(t, tx, ty);
  return [this, &t, um, un, gx, gy, tx, ty, acc](Block& steps) {
    int kkVar = freshKernelVar();
    Idx kk = idxVar(kkVar, "kk");
    extents_[kkVar] = t.s.tileK;
    Block inner;
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      std::vector<FE> a, b;
      for (int64_t i = 0; i < um; ++i) {
        int sl = slot(fmt::format("a{}_{}", st, i));
        inner.push_back(assign(sl, loadShared(t.sharedA[st], simplify(tile::sliceSlot(t.s.a, kk, ty + idxConst(i * gy), t.s.tileM, t.s.tileK), extents_))));
        a.push_back(fvar(sl));
      }
      for (int64_t j = 0; j < un; ++j) {
        int sl = slot(fmt::format("b{}_{}", st, j));
        inner.push_back(assign(sl, loadShared(t.sharedB[st], simplify(tile::sliceSlot(t.s.b, kk, tx + idxConst(j * gx), t.s.tileN, t.s.tileK), extents_))));
        b.push_back(fvar(sl));
      }
      for (int64_t i = 0; i < um; ++i)
        for (int64_t j = 0; j < un; ++j) {
          int s = acc[st][static_cast<size_t>(i * un + j)];
          inner.push_back(assign(s, fapply(Fn::Add, {fvar(s), fapply(Fn::Mul, {a[static_cast<size_t>(i)], b[static_cast<size_t>(j)]})})));
        }
    }
    steps.push_back(forLoop(kkVar, "kk", idxConst(0), idxConst(t.s.tileK), 1, std::move(inner)));
  };
}

// Tensor cores: 4 warps in a 2 x 2 grid, each owning a (tile_m/2) x (tile_n/2) quarter of the tile as
// (tile_m/32) x (tile_n/16) mma tiles of 16 x 8. Per 16 of k, a warp reads its A fragments (16 x 16 per mma row)
// and B fragments (16 x 8 per mma column) from shared memory in the lane layout of kernel::mma and issues one
// mma per (row, column) pair, tile_k / 16 times per staged slice; lane (g, t) owns the outputs of its C fragments.
std::function<void(Block&)> KernelBuilder::multiplyOnTensorCores(Tiling& t) {
  const DType type = t.s.mmaType;
  const bool pairs = t.s.fragments == tile::TiledContraction::Fragments::Pairs;
  const bool viaLdmatrix = t.s.fragments == tile::TiledContraction::Fragments::Ldmatrix;
  const int64_t wm = t.s.tileM / 2, wn = t.s.tileN / 2, mi = wm / kMmaM, ni = wn / kMmaN;
  Idx warp = defVar(k_.body, "warp", floorDiv(threadIdx(), 32), 4);
  Idx lane = defVar(k_.body, "lane", mod(threadIdx(), 32), 32);
  Idx g = defVar(k_.body, "g", floorDiv(lane, 4), 8);
  Idx q = defVar(k_.body, "t", mod(lane, 4), 4);
  Idx warpRow = defVar(k_.body, "wr", floorDiv(warp, 2), 2);
  Idx warpCol = defVar(k_.body, "wc", mod(warp, 2), 2);
  // acc[stage][(i*ni + j)*4 + e]: element e of the C fragment of mma tile (i, j).
  std::vector<std::vector<int>> acc(lk_.stages.size());
  for (size_t st = 0; st < lk_.stages.size(); ++st)
    for (int64_t i = 0; i < mi; ++i)
      for (int64_t j = 0; j < ni; ++j)
        for (int e = 0; e < 4; ++e) {
          acc[st].push_back(slot(fmt::format("c{}_{}_{}_{}", st, i, j, e)));
          k_.body.push_back(assign(acc[st].back(), fconst(0.f)));
        }
  // The fragment layouts of kernel::mma (mmaElementA/B/C) are lane 0's element offsets plus (g, 2t) for A and C,
  // (2t, g) for B, with g = lane / 4 and t = lane % 4.
  for (int64_t i = 0; i < mi; ++i)
    for (int64_t j = 0; j < ni; ++j)
      for (int e = 0; e < 4; ++e) {
        auto [dr, dc] = mmaElementC(0, e);
        Idx row = t.tileM * idxConst(t.s.tileM) + warpRow * idxConst(wm) + idxConst(i * kMmaM + dr) + g;
        Idx col = t.tileN * idxConst(t.s.tileN) + warpCol * idxConst(wn) + idxConst(j * kMmaN + dc) + q * idxConst(2);
        Owned o{simplify(row, extents_), simplify(col, extents_), {}};
        for (size_t st = 0; st < lk_.stages.size(); ++st) o.acc.push_back(acc[st][static_cast<size_t>((i * ni + j) * 4 + e)]);
        t.owned.push_back(std::move(o));
      }
  KILN_ASSERT(t.s.tileK % kMmaK == 0, "kernel {}: tensor-core tiles take tile_k a multiple of {}, not {}", lk_.name, kMmaK, t.s.tileK);
  if (viaLdmatrix)
    return [this, &t, mi, ni, lane, warpRow, warpCol, acc](Block& inner) { ldmatrixSteps(t, mi, ni, lane, warpRow, warpCol, acc, inner); };
  return [this, &t, type, pairs, wm, wn, mi, ni, g, q, warpRow, warpCol, acc](Block& inner) {
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      // Fragment registers (without mma_pairs), reused by every k-step of the staged slice.
      std::vector<std::vector<int>> a(static_cast<size_t>(mi)), b(static_cast<size_t>(ni));
      if (!pairs) {
        for (int64_t i = 0; i < mi; ++i)
          for (int e = 0; e < 8; ++e) a[static_cast<size_t>(i)].push_back(slot(fmt::format("fa{}_{}_{}", st, i, e)));
        for (int64_t j = 0; j < ni; ++j)
          for (int e = 0; e < 4; ++e) b[static_cast<size_t>(j)].push_back(slot(fmt::format("fb{}_{}_{}", st, j, e)));
      }
      for (int64_t step = 0; step < t.s.tileK / kMmaK; ++step) {  // one mma k-step per 16 of the staged slice
        const Idx kk = idxConst(step * kMmaK);
        // Where fragment element e of the warp's mma row i (column j) lies in the slice: A[row][k] at slice row
        // warp row offset + 16 i + row; B[k][n] at slice row warp column offset + 8 j + n (sliceSlot's layout).
        auto atA = [&](int64_t i, int e) {
          auto [dr, dc] = mmaElementA(0, e);
          return simplify(tile::sliceSlot(t.s.a, kk + idxConst(dc) + q * idxConst(2), warpRow * idxConst(wm) + idxConst(i * kMmaM + dr) + g, t.s.tileM, t.s.tileK), extents_);
        };
        auto atB = [&](int64_t j, int e) {
          auto [dk, dn] = mmaElementB(0, e);
          return simplify(tile::sliceSlot(t.s.b, kk + idxConst(dk) + q * idxConst(2), warpCol * idxConst(wn) + idxConst(j * kMmaN + dn) + g, t.s.tileN, t.s.tileK), extents_);
        };
        if (!pairs) {
          for (int64_t i = 0; i < mi; ++i)
            for (int e = 0; e < 8; ++e)
              inner.push_back(assign(a[static_cast<size_t>(i)][static_cast<size_t>(e)], loadShared(t.sharedA[st], atA(i, e))));
          for (int64_t j = 0; j < ni; ++j)
            for (int e = 0; e < 4; ++e)
              inner.push_back(assign(b[static_cast<size_t>(j)][static_cast<size_t>(e)], loadShared(t.sharedB[st], atB(j, e))));
        }
        for (int64_t i = 0; i < mi; ++i)
          for (int64_t j = 0; j < ni; ++j) {
            std::vector<int> c(acc[st].begin() + (i * ni + j) * 4, acc[st].begin() + (i * ni + j) * 4 + 4);
            if (!pairs) {
              inner.push_back(mma(type, a[static_cast<size_t>(i)], b[static_cast<size_t>(j)], c));
              continue;
            }
            // Straight from the [row][k] slices: pair p is fragment elements 2p and 2p+1 (k and k+1).
            std::vector<Idx> aPairs, bPairs;
            for (int e = 0; e < 8; e += 2) aPairs.push_back(atA(i, e));
            for (int e = 0; e < 4; e += 2) bPairs.push_back(atB(j, e));
            inner.push_back(mmaFromShared(type, t.sharedA[st], std::move(aPairs), t.sharedB[st], std::move(bPairs), c));
          }
      }
    }
  };
}

}  // namespace kiln::kernel::detail
