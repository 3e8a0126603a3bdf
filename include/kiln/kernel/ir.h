// Kernel IR: the GPU program made concrete (DESIGN.md §1). Explicit thread and block indices, loops,
// guards, global and shared memory, barriers; the launch configuration is decided here.
//
// Integer values are IndexExprs over index variables. Two variable ids are reserved: kThreadIdx
// (threadIdx.x) and kBlockIdx (blockIdx.x); launches are one-dimensional for now. Float values are
// expression trees over float variables, global loads (converted from the buffer's dtype to f32) and
// shared loads. Statements are structured (no goto), so the CPU interpreter can run all threads of a
// block in lockstep with an active mask, exactly as a warp-synchronous machine would.
#pragma once
#include <array>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kiln/kernel/ops.h"
#include "kiln/loop/ir.h"
#include "kiln/support/host_tensor.h"
#include "kiln/support/index_expr.h"
#include "kiln/support/target.h"

namespace kiln::kernel {

using tensor::Fn;

constexpr int kThreadIdx = 0;
constexpr int kBlockIdx = 1;
Idx threadIdx();
Idx blockIdx();

struct FExpr {
  enum class Kind { Const, Var, LoadGlobal, LoadShared, Apply, Select };
  Kind kind;
  float value = 0.f;          // Const
  int var = -1;               // Var: float variable slot
  int param = -1;             // LoadGlobal: kernel parameter index
  int shared = -1;            // LoadShared: shared buffer index
  Idx index;                  // loads: flat element index; Select: lhs of `lhs < bound`
  Idx bound;                  // Select
  Fn fn = Fn::Add;            // Apply
  DType castTo = DType::F32;  // Apply(Cast)
  std::vector<FE> args;       // Apply: operands; Select: {value if index < bound, value otherwise}
};
FE fconst(float v);
FE fvar(int slot);
FE loadGlobal(int param, Idx index);
FE loadShared(int buffer, Idx index);
FE fapply(Fn fn, std::vector<FE> args, DType castTo = DType::F32);
FE fselect(Idx lhs, Idx bound, FE a, FE b);

struct Stmt;
using Block = std::vector<Stmt>;
struct Stmt {
  enum class Kind {
    DefIdx,       // const index var = index
    Assign,       // float var = value
    For,          // for (var = begin; var < end; var += step) body
    If,           // if (lhs < rhs) body
    StoreGlobal,  // param[index] = value (converted to the buffer's dtype)
    StoreShared,  // shared[index] = value
    Barrier,      // __syncthreads(): every thread of the block must reach it
    Mma,          // warp-wide tensor-core product, see mma() below
    LoadVector,   // float slots = param[index .. index + W), one aligned vector load, see loadVector()
    StoreVector,  // param[index .. index + W) = values, one aligned vector store, see storeVector()
    LoadSharedVector,  // float slots = shared[index .. index + W), one aligned vector load, see loadSharedVector()
    ShuffleXor,   // float var = src of lane ^ laneMask (warp-collective), see shuffleXor()
    CpAsync,      // asynchronous global -> shared copy of 4, 8 or 16 bytes, see cpAsync()
    CpAsyncCommit,  // closes the thread's open cp.async group
    CpAsyncWait,    // waits for all but the newest `pendingGroups` committed groups of the thread
    Ldmatrix,       // warp-collective load of 8x8 b16 matrices from shared into fragment slots, see ldmatrix()
    Wgmma,            // warpgroup-collective asynchronous tensor-core product from shared memory, see wgmma()
    WgmmaFence,       // wgmma.fence: orders the warpgroup's earlier register accesses before the wgmmas after it
    WgmmaCommit,      // closes the warpgroup's open group of wgmmas
    WgmmaWait,        // waits until at most `pendingGroups` of the warpgroup's committed wgmma groups are in flight
    FenceProxyAsync,  // fence.proxy.async.shared::cta: the thread's completed shared stores become visible to wgmma
    PackPair,         // pair register = two float slots rounded to the operand type, see packPair()
    MbarrierInit,           // a shared mbarrier gets its arrival count, see mbarrierInit()
    MbarrierArrive,         // the thread arrives on a shared mbarrier
    CpAsyncMbarrierArrive,  // the thread arrives once its earlier cp.async copies have landed
    MbarrierWait,           // the thread waits for a phase of a shared mbarrier to complete
    NamedBarrier,           // bar.sync id, threads: a barrier for one warp role, see namedBarrier()
    MbarrierExpectTx,       // mbarrier.arrive.expect_tx: an arrival that also awaits `bytes` of TMA copies, see tmaLoad()
    TmaLoad,                // a TMA tensor copy of one box from global to shared memory, see tmaLoad()
    ClusterBarrier,         // every thread of every block of the thread-block cluster, see clusterBarrier()
    FenceMbarrierInit,      // fence.mbarrier_init.release.cluster, see clusterBarrier()
    MbarrierArriveCluster,  // the thread arrives on an mbarrier of every block of its cluster, see mbarrierArriveCluster()
    BlockTicket,            // const index var = the block's ticket at a global counter (every thread reaches it), see blockTicket()
    CounterRelease,         // the thread adds one to a global counter, releasing what its block did before, see counterRelease()
    CounterAwait,           // the thread waits for a global counter to hold a count, then sets it to zero, see counterAwait()
  };
  Kind kind;
  Block body;  // For, If: the statements they run
  // The operands of the kind (kiln/kernel/ops.h): a struct each, every field meaning one thing; std::monostate for the
  // kinds that have none (barrier, cluster.barrier, the fences, cp.async.commit, wgmma.fence, wgmma.commit_group).
  op::Payload op;
  // A statement of `kind` with operands `op` (the constructors below check them first; the parser makes what it read).
  static Stmt of(Kind kind, op::Payload op = {}) {
    Stmt s;
    s.kind = kind;
    s.op = std::move(op);
    return s;
  }
  template <class Op>
  const Op& as() const { return std::get<Op>(op); }
  template <class Op>
  Op& as() { return std::get<Op>(op); }
  // A wgmma operand's core-matrix layout (op::CoreMatrices), the name wgmma()'s callers use.
  using CoreMatrices = op::CoreMatrices;
};
Stmt defIdx(int var, std::string name, Idx value);
// A definition whose value every lane of a warp shares (it reads threadIdx only through whole warps: a warp role), emitted
// as lane 0's value broadcast by __shfl_sync so that nvcc and ptxas know branches on it do not split a warp: a wgmma
// under a branch they take for divergent is serialized (ptxas C7518). The verifier checks the claim on every thread.
Stmt defWarpUniform(int var, std::string name, Idx value);
// s (a tmaLoad or mbarrierArriveExpectTx) done by one lane of each warp that reaches it, whole (elect.sync and a
// predicate, no branch): how a producer warp issues its copies without a branch on the lane, which would put the wgmmas
// of the loop it shares with the warpgroups on a path ptxas takes for divergent (it serializes them, C7518).
Stmt elected(Stmt s);
Stmt assign(int slot, FE value);
Stmt forLoop(int var, std::string name, Idx begin, Idx end, int64_t step, Block body);
Stmt ifLess(Idx lhs, Idx rhs, Block body);
Stmt storeGlobal(int param, Idx index, FE value);
Stmt storeShared(int buffer, Idx index, FE value);
Stmt barrier();
// D = A·B + C on one 16x16 (A) by 16x8 (B) tile per warp, in f32 (PTX mma.sync.aligned.m16n8k16.row.col.f32
// with bf16/f16 operands). Every lane of a warp must execute it together (like a barrier, but per warp). Lane
// l holds, with g = l / 4 and t = l % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//   a0..a7: A[g + 8*((i/2)%2)][2t + i%2 + 8*(i/4)]   b0..b3: B[2t + i%2 + 8*(i/2)][g]
//   c0..c3: C[g + 8*(i/2)][2t + i%2], overwritten with D.
// A and B values are rounded to `operandType` first.
Stmt mma(DType operandType, std::vector<int> a, std::vector<int> b, std::vector<int> c);
// The same product with A and B read straight from shared memory of the operand type, two elements (one 32-bit
// register) at a time: element pair j of A is sharedA[aPairs[j]], sharedA[aPairs[j] + 1] (fragment elements 2j
// and 2j+1), likewise for B; every pair index must be even (the registers are aligned 32-bit loads).
Stmt mmaFromShared(DType operandType, int sharedA, std::vector<Idx> aPairs, int sharedB, std::vector<Idx> bPairs,
                   std::vector<int> c);
// Vector global memory access: W = slots.size() (or values.size()) consecutive elements starting at `index`,
// moved by one aligned W * dtype-bytes load or store (4, 8 or 16 bytes; W a power of two >= 2; f32, bf16 or f16
// parameters). `index` must be a multiple of W (the verifier requires a proof: kernel parameters start 256-byte
// aligned in the runtime's arena, so element alignment is address alignment).
// loadVector: slots[i] = param[index + i] converted to f32. The stored elements are the buffer's own values.
Stmt loadVector(int param, Idx index, std::vector<int> slots);
// storeVector: param[index + i] = values[i] rounded to the parameter's dtype (as storeGlobal). All values are
// evaluated before any element is written.
Stmt storeVector(int param, Idx index, std::vector<FE> values);
// Vector shared memory load: slots[i] = shared[index + i] for W = slots.size() consecutive elements of a shared buffer,
// widened to f32: 2 or 4 of an f32 buffer, 4 or 8 of a bf16/f16 one; one aligned 8- or 16-byte load. `index` must provably
// be a multiple of W. CUDA-core products read four k of one operand row at a time this way; attention reads its staged
// output rows 16 bytes at a time.
Stmt loadSharedVector(int sharedBuf, Idx index, std::vector<int> slots);
// Warp shuffle: float slot dst = float slot src as held by lane (lane ^ laneMask) of the same warp, laneMask a
// power of two in 1..16 (__shfl_xor_sync with a full mask). Warp-collective like mma: every lane of a warp
// executes it together (never under thread-dependent control flow; blocks of whole warps). All lanes read src
// before any writes dst, so dst == src is allowed.
Stmt shuffleXor(int dstSlot, int srcSlot, int laneMask);
// The butterfly all-reduce of float slot `slot` over a warp: for m = 16, 8, 4, 2, 1,
//   tmp = shuffleXor(slot, m); slot = combine(slot, tmp)
// after which every lane holds combine over all 32 lanes' values (combine: a binary Fn, e.g. Add or Max).
Block warpAllReduce(Fn combine, int slot, int tmpSlot);

// Asynchronous copy (PTX cp.async, sm_80+): `bytes` (4, 8 or 16) bytes from param[globalIndex..] to
// sharedBuf[sharedIndex..], both of the same dtype, both element indices multiples of bytes / element size
// (aligned addresses). With validBytesOrNull non-null only that many leading bytes (a multiple of the element
// size, 0..bytes) are read from global memory and the rest of the destination is zero-filled (the src-size
// operand: how tails and padding are copied without a branch); with 0 nothing is read.
// Each thread's copies join its open group; cpAsyncCommit() closes the group; cpAsyncWait(n) blocks the thread
// until all but its n most recently committed groups have landed. Until then the destination elements may not
// be read (or written) by any thread; after the wait they are visible to the waiting thread only, and to the
// rest of the block after a following barrier (a barrier alone completes nothing).
Stmt cpAsync(int sharedBuf, Idx sharedIndex, int param, Idx globalIndex, int bytes, Idx validBytesOrNull = nullptr);
Stmt cpAsyncCommit();
Stmt cpAsyncWait(int pendingGroups);

// ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16 (sm_75+): loads count (1, 2 or 4) 8x8 matrices of a bf16
// or f16 shared buffer. Lane 8j + r supplies in `rowIndex` the element index of row r of matrix j (8 contiguous
// elements, 16-byte aligned: a multiple of 8); lanes at or above 8 * count supply nothing (their index is not
// evaluated). Lane l, with g = l / 4 and t = l % 4, receives for matrix j
//   slots[2j], slots[2j + 1] = M_j[g][2t], M_j[g][2t + 1]     (transpose: M_j[2t][g], M_j[2t + 1][g])
// widened to f32: exactly the A / B fragment layout of mma() when the matrices are its 8x8 quarters.
// Warp-collective like mma.
Stmt ldmatrix(int sharedBuf, Idx rowIndex, int count, bool transpose, std::vector<int> slots);
// The same load into pair registers (Kernel::pairVars): register j holds M_j[g][2t] (low half) and M_j[g][2t + 1]
// in the buffer's type, unconverted; count = regs.size().
Stmt ldmatrixPairs(int sharedBuf, Idx rowIndex, bool transpose, std::vector<int> regs);
// Pair register `reg` = float slots lo and hi rounded to `type` (bf16 or f16), lo in the low half: values computed in
// registers (attention's probabilities) become an mma operand once, however many mmas read them. Per thread.
Stmt packPair(DType type, int reg, int lo, int hi);
// mma with A and B in pair registers (register i of A holds fragment elements 2i, 2i+1; likewise B), as ldmatrix
// fills them: no conversion or packing between the load and the tensor cores.
Stmt mmaFromPairs(DType operandType, std::vector<int> aRegs, std::vector<int> bRegs, std::vector<int> c);

// wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{bf16|f16} (sm_90a), warpgroup-collective: the 128 threads of warpgroup
// q (threads 128q .. 128q + 127; blocks of whole warpgroups, never under thread-dependent control flow) compute
//   D[64 x n] += A[64 x 16] * B[n x 16]^T            (f32 accumulation, A and B of operandType)
// with both operands read from shared memory, k-major, as 8 x 8 core matrices of 128 contiguous bytes (no swizzle):
//   A(m, k) = sharedA[aStart + (m / 8) * layoutA.rowStride + (k / 8) * layoutA.kStride + (m % 8) * 8 + k % 8]
//   B(j, k) = sharedB[bStart + (j / 8) * layoutB.rowStride + (k / 8) * layoutB.kStride + (j % 8) * 8 + k % 8]
// (aStart, bStart and the strides multiples of 8: 16-byte aligned; the starts the same in every thread of the
// warpgroup). With swizzle128 the operand is 8-row groups of 128-byte rows (64 elements) in which 16-byte chunks are
// permuted by the row, as the hardware's 128-byte swizzle mode reads them:
//   logical(m, k) = aStart + (m / 8) * layoutA.rowStride + (m % 8) * 64 + k,
//   A(m, k) = sharedA[logical ^ (((logical / 64) % 8) * 8)]
// (aStart's row part a multiple of 8 rows, its column part + 16 within the row; the buffer 1024-byte aligned). Thread 128q + 32w + l, with g = l / 4 and t = l % 4, holds acc[4j + e] = D[16w + g + 8 (e / 2)][8j + 2t + e % 2]
// (the mma C fragment of kernel::mma repeated over n / 8 columns).
// The product is asynchronous: it joins the warpgroup's open group (closed by wgmmaCommit) and may read shared memory
// and write the accumulators until wgmmaWait leaves it no longer pending. So: shared stores (and landed cp.async
// copies) are made visible to it by fenceProxyAsync in the writing thread before the barrier that publishes them;
// no thread may write what a pending wgmma reads; wgmmaFence precedes the first wgmma of a batch.
// The interpreter multiplies when the wgmma is issued, and faults on a read of unfenced shared memory and on a write
// into shared memory a pending wgmma reads.
Stmt wgmma(DType operandType, int sharedA, Idx aStart, Stmt::CoreMatrices layoutA, int sharedB, Idx bStart,
           Stmt::CoreMatrices layoutB, int64_t n, std::vector<int> acc);
// The same product with A from registers (wgmma's register-A form): each thread's 4 pair registers (Kernel::pairVars,
// packed by packPair or ldmatrixPairs) hold, for thread 32w + l of the warpgroup (g = l / 4, t = l % 4), A's elements
//   a01: (16w + g, 2t .. 2t + 1)   a23: (16w + g + 8, 2t ..)   a45: (16w + g, 2t + 8 ..)   a67: (16w + g + 8, 2t + 8 ..)
// (mma's A fragment per warp: the accumulators of a previous wgmma, packed in pairs, are the A of the next one). B from
// shared as in wgmma(); with layoutB.mnMajor
//   B(j, k) = sharedB[bStart + (j / 8) * layoutB.rowStride + (k / 8) * layoutB.kStride + (k % 8) * 8 + j % 8]
// (imm-trans-b: core matrices of 8 k by 8 consecutive j); with mnMajor and swizzle128 (16-bit elements, the buffer
// 1024-byte aligned, bStart a multiple of 512: a group of 8 rows of k)
//   logical(j, k) = bStart + (j / 64) * layoutB.rowStride + (k / 8) * layoutB.kStride + (k % 8) * 64 + j % 64,
//   B(j, k) = sharedB[logical ^ (((logical / 64) % 8) * 8)]
// (rows of 64 j per k, as a TMA box of [k][64] writes them under the 128-byte swizzle; kStride 512). The registers are read at issue: they may be rewritten only
// after the wgmma is waited for, like the accumulators.
Stmt wgmmaRegA(DType operandType, std::vector<int> aRegs, int sharedB, Idx bStart, Stmt::CoreMatrices layoutB, int64_t n,
               std::vector<int> acc);
Stmt wgmmaFence();
Stmt wgmmaCommit();
Stmt wgmmaWait(int pendingGroups);
Stmt fenceProxyAsync();

// mbarriers (sm_80+): 64-bit barrier objects in a shared buffer marked `mbarriers` (element i is barrier i; no float
// access to it). A barrier counts arrivals in phases: mbarrierInit(b, i, n) gives barrier i n arrivals per phase (one
// thread initialises it; a block barrier must follow before any other thread uses it); each arrival, by
// mbarrierArrive or cpAsyncMbarrierArrive, counts one; the n-th completes the phase (once its TMA transaction count, if
// any, is back at zero: see tmaLoad) and starts the next. Unlike a block barrier these are per thread: they may run under
// thread-dependent control flow (warp roles: producer warps copy and arrive, consumer warps wait).
// cpAsyncMbarrierArrive (cp.async.mbarrier.arrive.noinc): the thread's arrival happens once all its earlier cp.async
// copies have landed (committed or not): a consumer waiting for the phase sees them without cp.async.wait or a block
// barrier. mbarrierWait(b, i, parity): the thread waits until the phase of barrier i whose parity (phases counted from
// 0) is `parity` has completed: a loop over a ring waits for phase (step / slots) of its slot with parity
// (step / slots) % 2.
// The interpreter runs threads in lockstep, so the arrivals a wait needs must come before it in program order (a
// producer branch before the consumer branch, each step of one loop); a wait for a phase that has not completed then
// is reported (it would wait forever), as are a read of copied elements by a thread that has not waited for the
// phase their copies arrive on, and uninitialised, unpublished or doubly initialised barriers.
Stmt mbarrierInit(int barriers, Idx index, int64_t arrivals);
Stmt mbarrierArrive(int barriers, Idx index);
Stmt cpAsyncMbarrierArrive(int barriers, Idx index);
Stmt mbarrierWait(int barriers, Idx index, Idx parity);
// bar.sync id, threads (id 1..15; barrier 0 is the block's): a barrier among the `threads` threads (whole warps) of
// one warp role. It may stand under thread-dependent conditions when exactly those threads, in whole warps, pass them
// (the verifier tries every thread; the conditions may read threadIdx only); the interpreter requires exactly that
// many active threads and publishes what a block barrier would (to the whole block: a permissive reading).
Stmt namedBarrier(int id, int64_t threads);

// TMA (sm_90+): one thread copies a whole box of a tensor map (Kernel::tensorMaps) into shared memory with one
// instruction (cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes), instead of every thread copying 16 bytes.
// tmaLoad(buf, index, map, col, row, barriers, b): the box of map `map` whose first element is (row, col) lands in
// shared `buf` from element `index` on (its byte offset a multiple of 128; 1024 with swizzle128), row-major,
// boxRows x boxCols elements, elements outside the map's rows and columns zero; with swizzle128 the 16-byte chunk c of
// box row r lies at chunk c ^ (r mod 8) of its 128-byte row (wgmma's 128-byte swizzle). Its box's bytes (all of them,
// zeros included) count toward the transaction count of the phase of mbarrier b in progress, which completes only once
// its arrivals have come and that count is back to zero: mbarrierArriveExpectTx(barriers, b, bytes) is an arrival
// that also raises the count by `bytes`, issued by the copying thread for the copies it is about to issue. Threads
// read the box after their mbarrierWait for that phase (without a block barrier or a proxy fence, wgmma included). The
// interpreter lands the box at the copy, tagged with the phase, and reports a read before the wait, a copy into
// elements a pending wgmma or cp.async still uses, and boxes or maps that break the rules above.
Stmt mbarrierArriveExpectTx(int barriers, Idx index, int64_t bytes);
Stmt tmaLoad(int sharedBuf, Idx sharedIndex, int tensorMap, Idx col, Idx row, int barriers, Idx barrierIndex);
// Thread-block clusters (sm_90+; Kernel::cluster > 1): blocks c * cluster .. c * cluster + cluster - 1 of the grid run
// together and may copy into each other's shared memory. With `multicast` a tmaLoad's box lands at the same element of
// the same buffer in every block of the issuing thread's cluster, and its bytes count on the same mbarrier of each
// (cp.async.bulk.tensor ... multicast::cluster with every block in the mask): the blocks of a cluster issuing one
// part each of a slice they all read fetch it from L2 once instead of once per block. A block may only be copied into
// once it is done with what the copy overwrites and its mbarriers are initialised: clusterBarrier() (barrier.cluster
// arrive.release + wait.acquire) is reached by every thread of every block of the cluster, like a block barrier but
// cluster-wide; fenceMbarrierInit() makes the thread's earlier mbarrier inits visible to the cluster before it. The
// interpreter runs one block at a time: a multicast copy lands, in the block running it, every part that its cluster's
// blocks issue with that statement (the statement evaluated with each one's blockIdx), so the kernel must be uniform
// over the cluster there (every block issues the statement at the same point, as thread-block SPMD code does).
Stmt tmaLoadMulticast(int sharedBuf, Idx sharedIndex, int tensorMap, Idx col, Idx row, int barriers, Idx barrierIndex);
Stmt clusterBarrier();
Stmt fenceMbarrierInit();
// One arrival on mbarrier `index` of `barriers` in every block of the cluster, this one included (mapa +
// mbarrier.arrive.shared::cluster per block): how a block tells the others it is done with a ring slot
// they multicast into, without stopping every thread as clusterBarrier() does. The interpreter counts the cluster's
// arrivals on the running block's barrier where its thread arrives (each block arrives at the same point, as above).
Stmt mbarrierArriveCluster(int barriers, Idx index);
// Blocks that meet at a counter (a split product's blocks of one output tile: the last to finish adds the others' parts).
// Every thread of the block reaches it, like barrier(). After a block barrier one thread takes a ticket with an acq_rel
// atomic at gpu scope, which makes the block's earlier global stores visible to later ticket holders: counter element
// `index` of parameter `param` (an i64 buffer of kind counters, zero when the kernel starts) is incremented, back to zero
// at the `blocks`-th ticket, and every thread of the block defines index variable `var` as the count before (0 ..
// blocks - 1; the ticket holder of blocks - 1 is the last to arrive). After it, a block sees every global store the blocks with earlier tickets made before taking theirs; the
// counter is zero again once all `blocks` tickets are taken, ready for the next launch. The interpreter runs the blocks
// one after another, so there the last block in grid order takes the last ticket.
Stmt blockTicket(int var, std::string name, int param, Idx index, int64_t blocks);
// Blocks that hand partial results to one block that waits for them (a stream-K product's tiles): one thread each, after
// a barrier of the threads whose stores it hands over (counterRelease), and before one for those that read what was handed
// (counterAwait). counterRelease adds one to counter element `index` of parameter `param` (an i64 buffer of kind counters)
// with release semantics at gpu scope: the global stores ordered before it (the barrier's threads') are visible to whoever
// acquires the count. counterAwait spins, with acquire loads at gpu scope, until the counter holds `count` (the number of
// releases it waits for), then sets it back to zero for the next launch: after it (and the barrier), the releasers'
// stores are visible. The interpreter runs blocks one after another: there the count must already be complete when
// the wait is reached (the releasing blocks come earlier in grid order), or it fails.
Stmt counterRelease(int param, Idx index);
Stmt counterAwait(int param, Idx index, Idx count);
constexpr int64_t kWgmmaM = 64, kWgmmaK = 16, kWarpgroupThreads = 128;
// The (row, column) of accumulator i of thread `thread` (0..127) of a warpgroup.
std::pair<int, int> wgmmaElement(int thread, int i);

constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
// The (row, column) of element i of a lane's A, B or C fragment (the layout above).
std::pair<int, int> mmaElementA(int lane, int i);
std::pair<int, int> mmaElementB(int lane, int i);
std::pair<int, int> mmaElementC(int lane, int i);

struct Param {
  int buffer;           // program buffer id (loop::Program numbering)
  std::string name;
  DType dtype;
  int64_t elements;
  bool written;         // the kernel stores to it (otherwise const __restrict__)
};

// A TMA tensor map: a two-dimensional view of kernel parameter `param` (its element (row, col) is
// param[offset + row * rowStride + col] for row < rows, col < cols) copied in boxes of boxRows x boxCols (each 1..256;
// boxCols * element bytes a multiple of 16, exactly 128 with swizzle128). offset and rowStride in bytes are multiples of
// 16. The runtime encodes it (cuTensorMapEncodeTiled) from the manifest's kernels[].tensor_maps and passes it by value
// as a `const __grid_constant__ CUtensorMap` after the kernel's pointer parameters.
struct TensorMap {
  int param = -1;
  int64_t offset = 0, rows = 0, cols = 0, rowStride = 0;
  int64_t boxRows = 0, boxCols = 0;
  bool swizzle128 = false;
  // The copies through this map are to be shared by the kernel's cluster of this many blocks, each block copying one
  // part of every box into all of them (kernel-multicast-operands carries it out; printed `multicast in N parts`);
  // 0: each block copies its own boxes. Left on a kernel, it changes nothing: the blocks copy for themselves.
  int64_t multicastParts = 0;
};

struct SharedBuffer {
  std::string name;
  int64_t elements;
  DType dtype = DType::F32;  // f32, or bf16/f16: stores round to it, loads widen to f32
  // Placed in the kernel's dynamic shared memory (`extern __shared__`) instead of static storage: how a block
  // gets more than 48 KiB. Dynamic buffers are laid out in declaration order, each at a 16-byte aligned offset
  // (Kernel::dynamicSharedOffset); Kernel::dynamicSharedBytes must cover them.
  bool dynamic = false;
  // `elements` mbarriers (8 bytes each, see mbarrierInit), not floats: only the mbarrier statements touch them.
  bool mbarriers = false;
  int64_t elementBytes() const { return mbarriers ? 8 : dtypeBytes(dtype); }
};

struct Kernel {
  std::string name;
  std::vector<Param> params;
  std::vector<SharedBuffer> shared;      // static shared memory
  std::vector<TensorMap> tensorMaps;     // TMA tensor maps over the params, passed after them
  std::vector<std::string> floatVars;    // float slot names
  // 32-bit registers each holding two 16-bit operand elements (bf16/f16, element 0 in the low half): what ldmatrix
  // loads and mma consumes, kept packed between them.
  std::vector<std::string> pairVars;
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  // Blocks per thread-block cluster along x (1: none; 2..8, dividing grid[0]; sm_90+), see tmaLoadMulticast.
  int64_t cluster = 1;
  // Blocks packed into one thread block (1: none; 2..8, dividing grid[0]): grid and block stay those of the kernel's
  // blocks as its body sees them (blockIdx, threadIdx, barriers, shared buffers), and the launch runs grid[0] / groups
  // thread blocks of groups * block[0] threads. Block b of the body is group b mod groups of thread block b div groups:
  // its threads are that thread block's [g * block[0], (g + 1) * block[0]), each group has its own copy of the dynamic
  // shared memory (dynamicSharedBytes, rounded up to 1024 bytes, apart) and `barrier` is the group's (bar.sync 1 + g).
  // What it is for: blocks that must share an SM (a GPU places separate blocks where it chooses:
  // bench/probes/block_placement.cu). The interpreter runs the body's blocks as it would without. A kernel with groups
  // has neither static shared buffers, named barriers, block tickets nor clusters, and block[0] is whole warps.
  int64_t groups = 1;
  int64_t groupSharedBytes() const;  // a group's share of the thread block's dynamic shared memory
  // Programmatic dependent launch (sm_90+; Target::programmaticLaunch), set by kernel-overlap-launches: every thread
  // first waits until the grids launched before this one on the stream have completed and their writes are visible
  // (griddepcontrol.wait, before the body touches any memory); after the body it allows the next grid to launch
  // (griddepcontrol.launch_dependents). The runtime launches such a kernel with programmatic stream serialization
  // (the manifest's kernels[].programmatic_launch), so the next kernel's launch overlaps the end of this one (its last
  // blocks, their writes reaching memory) instead of following it. Allowing the launch at the start of the body made
  // split products and some multi-block-per-SM products slower on the H200 (d196aab; docs/gpu-checks.md), most likely
  // because the next kernel's blocks are then placed while this one's still occupy the SMs (a partial-sum kernel's
  // small blocks crowding onto the few SMs a product leaves free) — a guess the timings fit, not a measured cause.
  // Nothing in the body changes: the interpreter runs the kernel as it would without.
  bool programmaticLaunch = false;
  // Dynamic shared memory per block, passed at launch (the manifest's kernels[].shared_bytes; the runtime sets
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES above 48 KiB). At least dynamicBuffersBytes().
  int64_t dynamicSharedBytes = 0;
  Block body;
  std::vector<std::string> origins;      // Torch ops it holds (from Loop IR)
  int64_t sharedBytes() const;           // static shared memory in bytes (buffers not marked dynamic)
  int64_t dynamicBuffersBytes() const;   // end of the last dynamic buffer in the dynamic layout
  int64_t dynamicSharedOffset(int buffer) const;  // byte offset of dynamic buffer `buffer` (16-byte aligned)
};

struct Program {
  std::string modelName;
  std::vector<loop::Buffer> buffers;     // same buffers and ids as the Loop IR
  std::vector<int> inputs, outputs;
  std::vector<Kernel> kernels;           // launch order
  Target target = defaultTarget();       // the verifier's shared-memory limits and instruction set
  // (output, input) buffer pairs the memory plan puts on the same bytes: a state updated in place (compileModel, from
  // loop::inPlaceStates), recorded in the manifest and printed as "in_place OUTPUT, INPUT". The output starts with
  // the input's values, so an element no kernel writes keeps its value (kernel-store-only-changes, the interpreter).
  std::vector<std::pair<int, int>> inPlace;
};

std::string print(const Program& p);
nlohmann::json toJson(const Program& p);
// Static hardware rules: no barrier under thread-divergent control flow; static shared memory within the
// target's 48 KiB, static + dynamic within its per-block maximum (227 KiB on sm_90); shared indices within
// bounds; every variable defined before use; launch dimensions within limits.
void verify(const Program& p);

// Executes the kernels on the CPU, one block at a time, all threads of a block in lockstep. Shared
// memory reads of elements no thread wrote, out-of-bounds accesses and divergent barriers throw
// InternalError naming the kernel. Outputs and temporaries start poisoned (NaN).
// With `counts`, also what the run read from global memory.
struct InterpretCounts {
  // [kernel][buffer] (the Program's indices and ids): elements the kernel read from the buffer in global memory by loads
  // (scalar and vector), index reads, cp.async (the valid bytes, in elements) and TMA boxes (whole boxes, edges
  // included).
  std::vector<std::vector<int64_t>> elementsRead;
};
// With `afterKernel`, called after each kernel ran (its index in p.kernels) with every buffer's values (the Program's
// ids, f32 values rounded to each buffer's dtype), which it may change: what `kiln run --bisect` reads.
using AfterKernel = std::function<void(size_t kernel, std::vector<std::vector<float>>& buffers)>;
std::vector<HostTensor> interpret(const Program& p, const std::vector<HostTensor>& inputs, InterpretCounts* counts = nullptr,
                                  const AfterKernel& afterKernel = {});

// The lowering into this level (passes/kernel/lower_from_tile.cpp) is declared in kiln/kernel/lower.h, the
// one header that sees both Tile IR and Kernel IR.

}  // namespace kiln::kernel
