// Typed Kernel IR operations: a statement kind's operands as a struct of its own, each field meaning one thing, held
// in Stmt::op (kiln/kernel/ir.h). The mbarrier family, the TMA copy that completes on an mbarrier and the register
// family (mma, ldmatrix, wgmma, pair packing, shuffles) are typed; the other kinds still keep their operands in Stmt's shared fields (`target`, `a`, `b`, ...), whose meaning changes by
// kind, and move here family by family (docs/pipeline.md, "Kernel IR"). The constructors (mbarrierInit(), tmaLoad(),
// ... in ir.h) set Stmt::kind and Stmt::op together; what each operation does is documented there.
#pragma once
#include <cstdint>
#include <variant>
#include <vector>

#include "kiln/support/dtype.h"
#include "kiln/support/index_expr.h"

namespace kiln::kernel::op {

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

// monostate: a statement whose operands are still in Stmt's shared fields.
using Payload = std::variant<std::monostate, MbarrierInit, MbarrierArrive, MbarrierArriveCluster, CpAsyncMbarrierArrive,
                             MbarrierExpectTx, MbarrierWait, TmaLoad, Mma, Ldmatrix, Wgmma, PackPair, ShuffleXor>;

// The mbarrier an operation of the family arrives on, waits for or completes its bytes on; null for any other payload.
const Mbarrier* mbarrierOf(const Payload& p);
// The index expressions of a payload, in the order its text prints them (none for monostate): what passes over every
// index of a statement (variable scans, the verifier's definitions-before-use) read.
std::vector<const Idx*> indices(const Payload& p);
// Whether the payload is issued by one elected lane of each warp that reaches it.
bool isElected(const Payload& p);
// The float slots a payload reads or writes (none for monostate and the mbarrier family): what the interpreter sizes
// its slots by.
std::vector<int> floatSlots(const Payload& p);

}  // namespace kiln::kernel::op
