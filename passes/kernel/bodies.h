// Kernel bodies copied into other kernels: what kernel-merge-launches (one launch of independent kernels, side by
// side) and kernel-finish-in-last-block (a small kernel run by the last block of the one before it) share.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "kiln/kernel/ir.h"

namespace kiln::kernel {

// Whether every statement of b is of the CUDA-core family: definitions, loops, conditions, global and shared loads and
// stores, block barriers and warp shuffles (no tensor-core, asynchronous-copy, mbarrier, cluster or counter statements).
bool cudaCoreFamily(const Block& b);
// Whether b holds a block barrier or a warp shuffle (statements every thread of a block, or of a warp, must reach).
bool hasCollectives(const Block& b);
// Whether k may be copied into another kernel: one-dimensional, of the CUDA-core family, without clusters, packed
// groups, tensor maps, pair registers, dynamic shared memory or counters.
bool copyable(const Program& p, const Kernel& k);
// The buffer a parameter's bytes belong to: a state's new value written in place is its current value's.
int storage(const Program& p, int buffer);
// The largest index variable id a block defines.
int maxVar(const Block& b);
// The ranges of the index variables in scope at statement `at` of k (found by address), as a lowering knew them when
// it built it: threads, blocks, the enclosing loops (from 0 to a constant end) and the definitions before it (their
// values' ranges). What a pass that rebuilds an index simplifies it with.
VarExtents extentsAt(const Kernel& k, const Stmt& at);
// Every index variable the statements of b read (their indices and those inside their float expressions), added to vars.
void varsRead(const Block& b, std::set<int>& vars);
// Every index variable a float expression reads (its loads' indices, its selects' comparisons), added to vars.
void varsRead(const FE& e, std::set<int>& vars);

// Copies a kernel's statements into another kernel: its parameters, shared buffers, float slots and index variables
// renumbered to the other kernel's, its blockIdx.x read as `blockVar`.
struct Renumber {
  std::vector<int> param, shared;
  int slotOffset = 0, varOffset = 0;
  Idx blockVar;  // what blockIdx.x reads as (a constant folds the sums and products it enters)
  Idx threadVar;  // what threadIdx.x reads as (null: itself)
  std::string nameSuffix;  // appended to the names of the index variables (C scopes may not redeclare a name)
  mutable bool readsBlock = false;  // whether the body read blockIdx.x (nvcc refuses an unused definition)

  Idx idx(const Idx& e) const;
  FE fexpr(const FE& e) const;
  std::vector<int> slots(std::vector<int> s) const;
  op::Payload payload(const Stmt& s) const;
  Block statements(const Block& b) const;
};

}  // namespace kiln::kernel
