// Typed Kernel IR operations: a statement kind's operands as a struct of its own, each field meaning one thing, held
// in Stmt::op (kiln/kernel/ir.h). Every kind with operands has its struct here; the constructors (mbarrierInit(),
// tmaLoad(), ... in ir.h) set Stmt::kind and Stmt::op together; what each operation does is documented there.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kiln/support/dtype.h"
#include "kiln/support/index_expr.h"

namespace kiln::kernel {
struct FExpr;  // a float expression (kiln/kernel/ir.h)
using FE = std::shared_ptr<const FExpr>;
}  // namespace kiln::kernel

namespace kiln::kernel::op {

// Definitions, assignments, loops and conditions. A loop's or a condition's statements are Stmt::body.
struct DefIdx {  // const index variable `var` (`name`) = value; warpUniform: see defWarpUniform()
  int var = -1;
  std::string name;
  Idx value;
  bool warpUniform = false;
};
struct Assign {  // float slot `slot` = value
  int slot = -1;
  FE value;
};
struct For {  // for (var = begin; var < end; var += step) body
  int var = -1;
  std::string name;
  Idx begin, end;
  int64_t step = 1;
  // A product's k loop over a ring of this many slots, to be walked in rounds of that many steps by kernel-unroll-rings
  // (printed `unroll ring N`); 0: an ordinary loop. The emitter ignores it: a loop left rolled is still correct.
  int64_t unrollRing = 0;
};
struct If {  // if (lhs < rhs) body
  Idx lhs, rhs;
};

// Global and shared memory (see storeGlobal(), loadVector(), ... in ir.h). `param` is a kernel parameter, `shared` a
// shared buffer, `index` the first element's; `slots` are float slots, loaded widened to f32.
struct StoreGlobal {
  int param = -1;
  Idx index;
  FE value;
};
struct StoreShared {
  int shared = -1;
  Idx index;
  FE value;
};
struct LoadVector {
  int param = -1;
  Idx index;
  std::vector<int> slots;
};
struct StoreVector {
  int param = -1;
  Idx index;
  std::vector<FE> values;
};
struct LoadSharedVector {
  int shared = -1;
  Idx index;
  std::vector<int> slots;
};

// One mbarrier: element `index` of shared buffer `buffer`, a buffer marked `mbarriers`.
struct Mbarrier {
  int buffer = -1;
  Idx index;
};

struct MbarrierInit {  // the barrier gets `arrivals` arrivals per phase
  Mbarrier barrier;
  int64_t arrivals = 0;
};
struct MbarrierArrive {  // the thread arrives
  Mbarrier barrier;
};
struct MbarrierArriveCluster {  // the thread arrives on this barrier of every block of its cluster
  Mbarrier barrier;
};
struct CpAsyncMbarrierArrive {  // the thread arrives once its earlier cp.async copies have landed
  Mbarrier barrier;
};
struct MbarrierExpectTx {  // an arrival that also awaits `bytes` of TMA copies; `elected`: one lane of each warp
  Mbarrier barrier;
  int64_t bytes = 0;
  bool elected = false;
};
struct MbarrierWait {  // the thread waits for the phase of parity `parity` (0 or 1) to complete
  Mbarrier barrier;
  Idx parity;
};
// The box of tensor map `tensorMap` whose first element is (row, col) lands in shared buffer `shared` from element
// `sharedIndex` on; its bytes complete on `barrier`. `multicast`: into every block of the cluster; `elected`: issued by
// one lane of each warp that reaches it.
struct TmaLoad {
  int shared = -1;
  Idx sharedIndex;
  int tensorMap = -1;
  Idx col, row;
  Mbarrier barrier;
  bool multicast = false;
  bool elected = false;
};

// `bytes` (4, 8 or 16) bytes from parameter `param` at element `globalIndex` to shared buffer `shared` at element
// `sharedIndex`; with `validBytes` (null: all) only that many are read and the rest zero-filled.
struct CpAsync {
  int shared = -1;
  Idx sharedIndex;
  int param = -1;
  Idx globalIndex;
  int bytes = 0;
  Idx validBytes;
};
struct CpAsyncWait {  // the thread waits for all but its `pendingGroups` newest committed cp.async groups
  int pendingGroups = 0;
};
struct WgmmaWait {  // the warpgroup waits until at most `pendingGroups` of its committed wgmma groups are in flight
  int pendingGroups = 0;
};
struct NamedBarrier {  // bar.sync id, threads: a barrier of `threads` threads (whole warps), id 1..15
  int id = 0;
  int64_t threads = 0;
};

// A counter blocks meet at: element `index` of kernel parameter `param`, an i64 buffer of kind counters.
struct Counter {
  int param = -1;
  Idx index;
};
struct BlockTicket {  // index variable `var` (`name`) = the block's ticket at `counter`, back to zero after `blocks`
  int var = -1;
  std::string name;
  Counter counter;
  int64_t blocks = 0;
};
struct CounterRelease {  // one thread adds one to the counter, releasing its block's earlier stores
  Counter counter;
};
struct CounterAwait {  // one thread waits for the counter to hold `count`, then sets it to zero
  Counter counter;
  Idx count;
};

// The register family: warp- and warpgroup-collective products and the loads, packs and shuffles that feed them.

// Float slots (Kernel::floatVars), one operand element each.
struct FloatSlots {
  std::vector<int> slots;
};
// Pair registers (Kernel::pairVars), each two 16-bit operand elements, element 0 in the low half.
struct PairRegs {
  std::vector<int> regs;
};

// Where an mma's A and B fragments come from (the fragment layouts of mma() in ir.h), one of three places.
struct MmaFromSlots {  // float slots a0..a7 and b0..b3, rounded to the operand type at the product
  std::vector<int> a, b;
};
// Shared memory of the operand type, two elements (one aligned 32-bit load) a pair: pair j of A is
// bufferA[aPairs[j]], bufferA[aPairs[j] + 1] (fragment elements 2j and 2j + 1); likewise B.
struct MmaFromShared {
  int bufferA = -1;
  std::vector<Idx> aPairs;  // a01 a23 a45 a67
  int bufferB = -1;
  std::vector<Idx> bPairs;  // b01 b23
};
struct MmaFromPairs {  // pair registers: a01 a23 a45 a67 and b01 b23
  std::vector<int> a, b;
};
using MmaOperands = std::variant<MmaFromSlots, MmaFromShared, MmaFromPairs>;
// mma.m16n8k16 per warp: accumulator slots c0..c3 += A·B, A and B of `operandType` (bf16 or f16), see mma().
struct Mma {
  DType operandType = DType::BF16;
  MmaOperands operands;
  std::vector<int> c;
};

// ldmatrix of 8x8 b16 matrices from `shared` (lane 8j + r supplies `rowIndex`, row r of matrix j), `.trans` where
// `transpose`, into two float slots a matrix (widened to f32) or one pair register a matrix, see ldmatrix().
struct Ldmatrix {
  int shared = -1;
  Idx rowIndex;
  bool transpose = false;
  std::variant<FloatSlots, PairRegs> into;
  int matrices() const;  // 1, 2 or 4 where the destinations are well formed
};

// A wgmma operand's 8 x 8 core matrices in shared memory (the layouts of wgmma() and wgmmaRegA() in ir.h).
struct CoreMatrices {
  int64_t kStride = 0;    // elements between core matrices adjacent in k (the descriptor's leading byte offset / 2)
  int64_t rowStride = 0;  // elements between core matrices adjacent in m or n (its stride byte offset / 2)
  // The 128-byte swizzle (16-bit operands 64 deep): rows of 64 elements, 16-byte chunk c of row r stored at chunk
  // c ^ (r mod 8); kStride is unused, rowStride is 512 (8 rows); see wgmma().
  bool swizzle128 = false;
  // B only: MN-major (wgmma's transposed B) core matrices, n contiguous inside each: 8 rows of k, each 8 consecutive n
  // (v as attention's P·V reads it: [key][width]); with swizzle128, rows of 64 consecutive n whose 16-byte chunks are
  // permuted by k, kStride 512 (8 rows of k), rowStride between blocks of 64 n; see wgmmaRegA().
  bool mnMajor = false;
};
// A wgmma operand in shared memory: from element `start` of `buffer` on, in `layout`.
struct SharedMatrix {
  int buffer = -1;
  Idx start;
  CoreMatrices layout;
};
// wgmma.mma_async m64n{n}k16 per warpgroup: accumulator slots `acc` (n / 2 of them) += A·B, A and B of `operandType`;
// A from shared memory or (wgmmaRegA) from the 4 pair registers a01 a23 a45 a67; see wgmma().
struct Wgmma {
  DType operandType = DType::BF16;
  int64_t n = 0;  // 8..256, a multiple of 8
  std::variant<SharedMatrix, PairRegs> a;
  SharedMatrix b;
  std::vector<int> acc;
  Idx scaleD;  // D += A·B where it is nonzero or null, D = A·B where it is zero (wgmma's scale-d)
};

// Pair register `reg` = float slots `lo` and `hi` rounded to `type` (bf16 or f16), lo in the low half.
struct PackPair {
  DType type = DType::BF16;
  int reg = -1;
  int lo = -1, hi = -1;
};

// Float slot `dst` = float slot `src` as lane (lane ^ laneMask) of the warp holds it (laneMask 1, 2, 4, 8 or 16).
struct ShuffleXor {
  int dst = -1;
  int src = -1;
  int laneMask = 0;
};

// monostate: a statement without operands (barrier, cluster.barrier, the fences, cp.async.commit, wgmma.fence,
// wgmma.commit_group).
using Payload = std::variant<std::monostate, MbarrierInit, MbarrierArrive, MbarrierArriveCluster, CpAsyncMbarrierArrive,
                             MbarrierExpectTx, MbarrierWait, TmaLoad, CpAsync, CpAsyncWait, WgmmaWait, NamedBarrier, BlockTicket,
                             CounterRelease, CounterAwait, StoreGlobal, StoreShared, LoadVector, StoreVector, LoadSharedVector,
                             DefIdx, Assign, For, If, Mma, Ldmatrix, Wgmma, PackPair, ShuffleXor>;

// The mbarrier an operation of the family arrives on, waits for or completes its bytes on; null for any other payload.
const Mbarrier* mbarrierOf(const Payload& p);
// The index expressions of a payload, in the order its text prints them (none for monostate): what passes over every
// index of a statement (variable scans, the verifier's definitions-before-use) read.
std::vector<const Idx*> indices(const Payload& p);
// The float expressions a payload evaluates.
std::vector<const FE*> floatValues(const Payload& p);
// The index variable a payload defines (DefIdx, For, BlockTicket), or -1.
int definedVar(const Payload& p);
// Whether the payload is issued by one elected lane of each warp that reaches it.
bool isElected(const Payload& p);
// The float slots a payload names, read or written (an assignment's, a vector load's, the register family's): what
// the interpreter sizes its slots by.
std::vector<int> floatSlots(const Payload& p);

}  // namespace kiln::kernel::op
