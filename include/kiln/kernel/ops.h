// Typed Kernel IR operations: a statement kind's operands as a struct of its own, each field meaning one thing, held
// in Stmt::op (kiln/kernel/ir.h). Typed so far: the mbarrier family and the TMA copy that completes on an mbarrier;
// cp.async and the waits for asynchronous groups; named barriers, block tickets and counters; loads and stores;
// definitions, assignments, loops and conditions. The other kinds still keep their operands in Stmt's shared fields (`target`, `a`, `b`, ...), whose meaning changes by
// kind, and move here family by family (docs/pipeline.md, "Kernel IR"). The constructors (mbarrierInit(), tmaLoad(),
// ... in ir.h) set Stmt::kind and Stmt::op together; what each operation does is documented there.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

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

// monostate: a statement whose operands are still in Stmt's shared fields.
using Payload = std::variant<std::monostate, MbarrierInit, MbarrierArrive, MbarrierArriveCluster, CpAsyncMbarrierArrive,
                             MbarrierExpectTx, MbarrierWait, TmaLoad, CpAsync, CpAsyncWait, WgmmaWait, NamedBarrier, BlockTicket,
                             CounterRelease, CounterAwait, StoreGlobal, StoreShared, LoadVector, StoreVector, LoadSharedVector,
                             DefIdx, Assign, For, If>;

// The mbarrier an operation of the family arrives on, waits for or completes its bytes on; null for any other payload.
const Mbarrier* mbarrierOf(const Payload& p);
// The index expressions of a payload, in the order its text prints them (none for monostate): what passes over every
// index of a statement (variable scans, the verifier's definitions-before-use) read.
std::vector<const Idx*> indices(const Payload& p);
// The float expressions a payload evaluates, and the float slots it writes.
std::vector<const FE*> floatValues(const Payload& p);
std::vector<int> floatSlotsWritten(const Payload& p);
// The index variable a payload defines (DefIdx, For, BlockTicket), or -1.
int definedVar(const Payload& p);
// Whether the payload is issued by one elected lane of each warp that reaches it.
bool isElected(const Payload& p);

}  // namespace kiln::kernel::op
