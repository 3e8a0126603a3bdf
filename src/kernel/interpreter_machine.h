// The Kernel-IR interpreter's machine state, shared by the files that implement it (internal to src/kernel):
//   interpreter.cpp        the lockstep executor: expressions, control flow, global and shared loads/stores;
//   interpreter_warp.cpp   warp-collective statements: mma, shuffles, ldmatrix;
//   interpreter_async.cpp  cp.async groups and the shared-memory visibility rules they bring;
//   interpreter_wgmma.cpp  wgmma; interpreter_mbarrier.cpp  mbarriers and the copies that arrive on them;
//   interpreter_tma.cpp    TMA tensor copies.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <array>
#include <deque>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "kiln/kernel/ir.h"
#include "kiln/support/error.h"

namespace kiln::kernel::interp {

[[noreturn]] inline void raise(std::string what) { throw InternalError(std::move(what)); }

struct Machine {
  const Program& p;
  const Kernel& k;
  std::vector<std::vector<float>>& buffers;  // program buffers
  int64_t T = 0;                             // threads per block
  int64_t block = 0;                         // current block
  int nf = 0;                                // float slots
  int np = 0;                                // pair registers
  std::vector<float> pairValues;             // per thread: two elements per pair register (thread-major)

  std::vector<std::vector<int64_t>> env;     // per thread: index variables
  std::vector<float> floats;                 // per thread: float slots (thread-major)
  std::vector<std::vector<float>> shared;
  std::vector<std::vector<uint8_t>> written;
  std::vector<std::vector<uint8_t>> masks;   // per nesting depth
  std::vector<std::vector<int64_t>> ends;    // per nesting depth: For end per thread
  std::vector<int64_t> idxTmp;               // per thread, for stores
  std::vector<float> valTmp;

  IndexLoader loader;                        // index values read from memory (gathers)

  // cp.async state, kept only when the kernel has cp.async statements.
  struct Copy {
    int buffer;
    int64_t start;
    std::vector<float> values;  // read from global memory when issued (kernels never write what they copy)
  };
  bool async = false;
  std::vector<std::vector<int32_t>> inFlight;  // per shared element: the thread whose copy into it has not landed, or -1
  std::vector<std::vector<int32_t>> landed;    // per shared element: the thread whose waited-for copy wrote it, until the
                                               // next barrier makes it visible to the block; or -1
  std::vector<std::vector<Copy>> openGroup;    // per thread: copies issued since its last commit
  std::vector<std::deque<std::vector<Copy>>> committed;  // per thread: committed groups not yet waited for, oldest first

  // wgmma state (interpreter_wgmma.cpp), kept only when the kernel has wgmma statements.
  bool wgmmaUsed = false;
  std::vector<std::vector<int32_t>> unfenced;  // per shared element: 1 + the thread whose write no fence.proxy.async of that
                                               // thread has followed yet, or 0
  std::vector<std::vector<int32_t>> pinned;    // per shared element: pending wgmma groups that read it
  using Reads = std::vector<std::pair<int, int64_t>>;  // (shared buffer, element) a wgmma read
  std::vector<Reads> wgOpen;                   // per warpgroup: reads of the wgmmas since its last commit
  std::vector<std::deque<Reads>> wgCommitted;  // per warpgroup: committed groups not yet waited for, oldest first

  // mbarrier state (interpreter_mbarrier.cpp), kept only when the kernel has mbarrier statements.
  struct Mbarrier {
    int64_t arrivals = 0;      // per phase; 0: not initialised
    int64_t pending = 0;       // arrivals the phase in progress still needs
    int64_t phase = 0;         // phases completed
    int64_t tx = 0;            // bytes the phase in progress still awaits (expected minus landed; may dip below 0)
    int32_t initBy = -1;       // the initialising thread, until a block barrier publishes the barrier to the others
    std::vector<int64_t> seen;  // per thread: phases it has seen complete by a wait
  };
  struct PhaseTag {            // a shared element that a copy arriving on barrier (barriers, index) wrote in `phase`
    int barriers = -1;
    int64_t index = 0, phase = 0;
  };
  bool mbarrierUsed = false;
  std::vector<std::vector<Mbarrier>> mbarriers;   // per shared buffer of mbarriers
  std::vector<std::vector<PhaseTag>> phaseTags;   // per element of the other shared buffers
  // Statements on every block of a thread-block cluster (interpreter_tma.cpp: multicast TMA copies, cluster-wide mbarrier
  // arrivals): per (statement, cluster, block's rank, n-th time a thread runs it) its operands (index, then a copy's column,
  // row and barrier), as first seen, assumed or run; per (statement, thread) of the running block, how often it ran.
  struct ClusterPart {
    std::array<int64_t, 4> operands;
    bool issued = false;  // by the block it belongs to, not only assumed by the others
  };
  std::map<std::tuple<const Stmt*, int64_t, int64_t, int64_t>, ClusterPart> clusterParts;
  std::map<std::pair<const Stmt*, int64_t>, int64_t> clusterRuns;
  std::array<int64_t, 4> clusterOperands(const Stmt& s, const std::vector<int64_t>& env);
  // The environments of thread t as each block of its cluster runs s (blockIdx theirs), checked against the others'.
  std::vector<std::vector<int64_t>> clusterIssuers(const Stmt& s, int64_t t);
  void finishCluster();  // after a cluster's last block: every part some block assumed was issued

  Machine(const Program& prog, const Kernel& kern, std::vector<std::vector<float>>& bufs)
      : p(prog), k(kern), buffers(bufs) {
    loader = [this](int param, int64_t flat) {
      const std::vector<float>& data = paramData(param);
      if (flat < 0 || flat >= static_cast<int64_t>(data.size()))
        raise(fmt::format("kernel {}: index read {}[{}] out of bounds", k.name, k.params[param].name, flat));
      countRead(param, 1);
      return static_cast<int64_t>(data[flat]);
    };
  }

  // Elements read from global memory, per program buffer (interpret's InterpretCounts), when counted.
  std::vector<int64_t>* elementsRead = nullptr;
  void countRead(int param, int64_t elements) {
    if (elementsRead) (*elementsRead)[static_cast<size_t>(k.params[param].buffer)] += elements;
  }

  const std::vector<float>& paramData(int param) {
    KILN_ASSERT(param >= 0 && param < static_cast<int>(k.params.size()), "kernel {}: parameter #{} of {}", k.name, param,
                k.params.size());
    return buffers[k.params[param].buffer];
  }

  void run();
  void exec(const Block& body, int depth);
  // exec's statement families (one function each; false where the statement is of another family).
  bool execControl(const Stmt& s, int depth);
  bool execMemory(const Stmt& s, int depth);
  bool execSynchronization(const Stmt& s, int depth);
  bool execAsyncCopy(const Stmt& s, int depth);
  bool execRegisters(const Stmt& s, int depth);
  float eval(const FExpr& e, int64_t t);
  int64_t vectorStart(int param, const Idx& index, int64_t t, size_t width, const char* verb);

  // interpreter_warp.cpp
  void mmaStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void shuffleStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void ldmatrixStep(const Stmt& s, const std::vector<uint8_t>& mask);
  // Threads active in warp w under `mask`: 0 or 32, else an error naming `what`.
  int64_t warpActive(int64_t w, const std::vector<uint8_t>& mask, const char* what);

  // interpreter_async.cpp
  void resetAsync();                                   // at the start of every block
  void checkSharedRead(int buffer, int64_t i, int64_t t);   // cp.async visibility of one element read by thread t
  // Element i of shared buffer `buffer` read by thread t: in bounds, written by some thread, its copy waited for.
  float readShared(int buffer, int64_t i, int64_t t, const Idx& index);
  void checkSharedWrite(int buffer, int64_t i, int64_t t);  // no store into an element a copy has not landed in
  void cpAsyncStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void cpAsyncCommitStep(const std::vector<uint8_t>& mask);
  void cpAsyncWaitStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void barrierStep();                                  // publishes landed copies to the block

  // interpreter_mbarrier.cpp
  void resetMbarriers();                                      // at the start of every block
  // The barrier statement s names (a tma.load's: barriers[b]), for thread t: in bounds, initialised and published.
  Mbarrier& mbarrierOf(const Stmt& s, int64_t t, const char* what);
  void arrive(Mbarrier& m);
  void completeIfDone(Mbarrier& m);                           // the phase completes: no arrivals or bytes outstanding
  void landCopy(const Copy& c, int64_t t, int32_t landedBy, const PhaseTag* tag);  // a copy's values reach shared memory
  void tmaLoadStep(const Stmt& s, const std::vector<uint8_t>& mask);  // interpreter_tma.cpp
  void mbarrierStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void checkPhaseTag(int buffer, int64_t i, int64_t t);       // a copied element read by t after its wait
  void publishMbarriers();                                    // at a block barrier

  // interpreter_wgmma.cpp
  void resetWgmma();                                         // at the start of every block
  void noteSharedWrite(int buffer, int64_t i, int64_t t);    // a store or landed copy by thread t (fence and pin rules)
  void wgmmaStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void wgmmaCommitStep(const std::vector<uint8_t>& mask);
  void wgmmaWaitStep(const Stmt& s, const std::vector<uint8_t>& mask);
  void fenceProxyAsyncStep(const std::vector<uint8_t>& mask);
  // The warpgroups the mask holds whole (a part of one is an error naming `what`). trailing: the block's last, partial warpgroup (a
  // producer warp) may take part whole too; it is then not listed (it issues no wgmma: wgmma.wait_group only).
  std::vector<int64_t> activeWarpgroups(const std::vector<uint8_t>& mask, const char* what, bool trailing = false);
  // An elected statement's threads: lane 0 of each warp in the mask, whose lanes must all be there (elect.sync).
  std::vector<uint8_t> electedLanes(const std::vector<uint8_t>& mask, const Stmt& s);
};

}  // namespace kiln::kernel::interp
