// The Kernel IR verifier's walk (verifier.cpp: the statements in order, scopes, launch limits; verifier_async.cpp: the
// statements of the asynchronous copies and tensor cores): its state and its checks, one kernel at a time.
#pragma once

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kernel/ir.h"
#include "kiln/support/error.h"
#include "verifier_ranges.h"

namespace kiln::kernel::detail {

struct Verifier {
  const Program& p;
  const Kernel& k;
  Verifier(const Program& program, const Kernel& kernel) : p(program), k(kernel) {}

  // Scoped state: copied on entry to a block, so leaving it drops its definitions and narrowings.
  struct Scope {
    std::set<int> defined;     // index variables in scope
    std::set<int> varying;     // thread-varying index variables in scope
    Ranges ranges;             // bounds of variables (opaque view of DefIdx variables)
    std::map<int, Idx> defs;   // DefIdx definitions in scope
    // Every variable in scope expanded down to threadIdx, blockIdx and one fresh variable per loop (a loop
    // variable is begin + step * trip), for proofs of alignment.
    std::map<int, Idx> expanded;
    bool reachable = true;     // false when the block provably never runs (bounds are then meaningless)
  };
  static constexpr int kTripVar = 1 << 20;  // + loop variable id: the trip count of that loop, in `expanded`

  // Program-order state of the walk.
  std::vector<bool> assigned;      // float slots assigned so far in program order
  std::vector<bool> pairAssigned;  // pair registers loaded so far in program order
  std::string divergence;          // non-empty while inside thread-dependent control flow: what makes it so
  std::vector<std::pair<Idx, Idx>> roleConditions;  // the thread-dependent conditions around here, expanded
  bool divergentLoop = false;      // inside a loop whose bounds depend on the thread

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    internalError(__FILE__, __LINE__, fmt::format("kernel IR verifier: kernel {}: ", k.name) +
                                          fmt::format(f, std::forward<Args>(args)...));
  }

  // The walk (verifier.cpp): launch limits and parameters, then every statement in order.
  void run();
  void block(const Block& body, Scope s);
  // block's statement families (one function each; false where the statement is of another family).
  bool checkControl(const Stmt& st, Scope& s);
  void checkLoop(const Stmt& st, const Scope& s);
  void checkCondition(const Stmt& st, const Scope& s);
  bool checkMemory(const Stmt& st, Scope& s);
  bool checkSynchronization(const Stmt& st, Scope& s);
  bool checkAsyncCopy(const Stmt& st, Scope& s);
  bool checkRegisters(const Stmt& st, Scope& s);
  void defineVar(int var, const std::string& name, Scope& s);

  // Indices and their bounds (verifier.cpp).
  void checkIdx(const Idx& e, const Scope& s, const char* what);
  bool varies(const Idx& e, const Scope& s);
  std::optional<Range> bound(const Idx& e, const Scope& s);
  Idx expand(const Idx& e, const Scope& s);

  // Values, memory and collectives (verifier.cpp).
  void checkExpr(const FE& e, const Scope& s);
  void checkSlotRead(int slot, const char* what);
  void checkSlotWrite(int slot, const char* what);
  void checkPairRegs(const std::vector<int>& regs, bool write, const char* what);
  void checkSharedIndex(int buffer, const Idx& index, const Scope& s, const char* what);
  // A vector access of `width` elements of parameter `param` at `index`: width and dtype, provable alignment,
  // bounds where known.
  void checkVectorAccess(int param, const Idx& index, size_t width, const Scope& s, const char* what);
  // Collective statements: every lane of every warp (every thread of every warpgroup: granule 128) that reaches them
  // executes them. Block-uniform control flow guarantees it in a block of whole groups; under thread-dependent
  // conditions (warp roles) those must read threadIdx alone and let whole groups through, outside loops whose bounds
  // depend on the thread.
  void checkWarpCollective(const char* what, int64_t granule = Target::kWarpSize, bool trailing = false);

  // Asynchronous copies and tensor cores (verifier_async.cpp).
  // mbarrier statements: sm_80+; a buffer of mbarriers, in bounds; 1 to (block threads) arrivals; a parity of 0 or 1.
  void checkMbarrier(const Stmt& st, const Scope& s);
  void checkSharedVectorLoad(const op::LoadSharedVector& load, const Scope& s);
  void checkCounter(const op::Counter& counter, const Scope& s, const std::string& what, const char* rule);
  // cp.async: an instruction of the target; same dtype on both sides; both indices provably aligned to the copy;
  // the shared range within its buffer and, without a valid-bytes operand, the global range within its parameter.
  void checkCpAsync(const Stmt& st, const Scope& s);
  // ldmatrix: warp-collective, an instruction of the target, b16 matrices, rows provably 16-byte aligned and in bounds.
  void checkLdmatrix(const Stmt& st, const Scope& s);
  // mma: warp-collective, A and B counts by where they come from (shared pairs even, in bounds and of the operand type),
  // the slots it reads assigned before.
  void checkMma(const Stmt& st, const Scope& s);
  // wgmma: sm_90a, warpgroup-collective, operands of its type in shared memory, starts and core-matrix strides 16-byte
  // aligned, every core matrix it reads inside its buffer, accumulators assigned before (they are read and written).
  void checkWgmma(const Stmt& st, const Scope& s);
};

}  // namespace kiln::kernel::detail
