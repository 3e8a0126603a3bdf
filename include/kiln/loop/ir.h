// Loop IR: one node is one kernel-to-be (DESIGN.md §1): a loop nest over named axes that loads, computes,
// reduces in stages, and writes one buffer.
//
//   kernel k3 writes t3[p0, p1, p2]            parallel axes p0.. span the output buffer's shape
//     for each row (p0 .. p{rowAxes-1}):
//       acc0 = max over r0 < 64: value0(row, r0)               stages, in order; a stage may use the
//       acc1 = sum over r1 < 64: value1(row, r1, acc0)         accumulators of the stages before it
//       t3[p0, p1, p2] = result(p, acc0, acc1)     the result may use every stage's accumulator
//
// A plain reduction is one stage whose rows are all the output points; softmax and RMSNorm fused into
// one kernel are stages over a row followed by the row's elementwise write (loop-fuse-rows).
// Values are expression trees (loads with index expressions, immediates, scalar functions); fusion
// substitutes a producer's expression for the loads of its buffer. Printing and lowering share common
// subexpressions, so a value loaded twice is loaded once.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/support/host_tensor.h"
#include "kiln/support/index_expr.h"
#include "kiln/tensor/ir.h"

namespace kiln::loop {

using tensor::Fn;
using tensor::ReduceFn;

struct Buffer {
  // Counters: i64 counters that kernels meet at (kernel::blockTicket), zero when the model is loaded and left zero by every
  // kernel that uses them; never poisoned, never shared with another buffer.
  enum class Kind { Input, Weight, Temp, Output, Counters };
  Kind kind = Kind::Temp;
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::shared_ptr<const torch::WeightData> weight;  // Weight buffers
  // Temp and Output buffers: the TorchScript value whose values this buffer holds once its kernels ran (from
  // tensor::Node::traced), or empty; a pass that changes what a buffer holds clears it. Not printed: the in-process
  // `kiln run --check --bisect` compares such buffers with LibTorch's values.
  std::string traced;
};
const char* bufferKindName(Buffer::Kind k);

struct Expr;
using ExprP = std::shared_ptr<const Expr>;
struct Expr {
  enum class Kind { Load, Imm, Apply, Acc, Select };
  Kind kind;
  int buffer = -1;            // Load
  std::vector<Idx> index;     // Load: one per buffer dim, over the kernel's axis variables; Select: {lhs, rhs}
  float imm = 0.f;            // Imm
  int stage = 0;              // Acc: which stage's accumulator
  Fn fn = Fn::Add;            // Apply
  DType castTo = DType::F32;  // Apply(Cast): rounds to this type
  std::vector<ExprP> args;    // Apply; Select: {value if lhs < rhs, value otherwise}
};
ExprP load(int buffer, std::vector<Idx> index);
ExprP imm(float v);
ExprP apply(Fn fn, std::vector<ExprP> args);
ExprP accRef(int stage = 0);
// lhs < rhs ? a : b, the condition on indices only (concatenation).
ExprP select(Idx lhs, Idx rhs, ExprP a, ExprP b);
// where(cond, x, y) as selects when cond is a comparison's value on indices (selects whose leaves are the immediates 1
// and 0, as loop-index-comparisons writes a kept comparison): cond with x for its 1s and y for its 0s. Null otherwise.
ExprP chooseOnIndices(const ExprP& cond, const ExprP& x, const ExprP& y);
// Every buffer an expression reads: its loads, and index values read from memory inside their indices.
void forEachBufferRead(const ExprP& e, const std::function<void(int buffer, bool asIndex)>& f);
// Renumbers every buffer an expression reads.
// With `named`, index reads also take the name of their buffer there (the name they print with: a temporary's changes
// with its number).
ExprP renumberBuffers(const ExprP& e, const std::function<int(int)>& newId, const std::vector<Buffer>* named = nullptr);
// The same for the memory reads inside an index expression.
Idx renumberIndexBuffers(const Idx& i, const std::function<int(int)>& newId, const std::vector<Buffer>* named = nullptr);
// Structural key: equal keys <=> equal expressions (used for common-subexpression sharing).
std::string exprKey(const ExprP& e);
// Rewrites every Load's index and buffer through f (returns a new tree).
ExprP mapLoads(const ExprP& e, const std::function<ExprP(const Expr& load)>& f);
// Rewrites every accumulator reference (acc<stage>) through f (returns a new tree).
ExprP mapAccs(const ExprP& e, const std::function<ExprP(int stage)>& f);
void forEachLoad(const ExprP& e, const std::function<void(const Expr& load)>& f);
// Rewrites every index expression (load indices and select conditions) through f.
ExprP mapIndices(const ExprP& e, const std::function<Idx(const Idx&)>& f);
// The Load an expression is, under any casts to f32 (which change no value); null if it computes anything.
const Expr* plainLoad(const ExprP& e);
// Whether variable `var` appears in an index of e (its loads' indices, its selects' conditions), anywhere in the tree.
bool usesVar(const Expr& e, int var);
// Number of scalar function applications (the work per evaluation).
int64_t applyCount(const ExprP& e);

struct Axis {
  int var;           // variable id used in index expressions
  std::string name;  // p0.. for parallel axes, r0.. for reduction axes
  int64_t extent;
};

struct Reduction {
  ReduceFn fn = ReduceFn::Sum;
  std::vector<Axis> axes;
  ExprP value;
};

// Attention as one kernel (loop-fuse-attention): softmax over a key axis j of scores that are themselves products,
// weighting values. Its kernel's rows are the parallel axes before parallel[rowAxes] (e, the width axis; any axes after
// it have extent 1), and its result reads as acc0
//   acc0(row, e) = sum_j w(j) * value(row, j, e) / sum_j w(j),   w(j) = exp(s(j) - max_j s(j))
//   s(j) = score(row, j) with acc0 there the product dot(row, j) = sum_d a(row, j, d) * b(row, j, d)
// all in f32. The interpreters compute it as written; a flash-attention schedule computes it in one pass over j
// (running maximum, rescaled sum and accumulators), never materialising s or w.
struct OnlineSoftmax {
  Axis key;         // j
  Reduction dot;    // a Sum over the depth axis d (q·k)
  ExprP score;      // from the row axes, j and acc0 (the dot): scale, masks, softcapping
  ExprP value;      // from the row axes, j and e (v)
  // A row whose every score is -inf (a fully masked query) has weights 0 and acc0 = 0: the safe softmax of PyTorch's
  // attention. Without it such a row's acc0 is NaN (0 / 0), as a plain softmax's weights are. Printed after the key axis, "(empty rows 0)".
  bool emptyRowsZero = false;
};

// Where the program reads a kernel's output, when it reads only some of it: loop-batch-expert-products turns a product
// whose B matrix is picked per row (a mixture of experts' weight gathered by each row's expert id) into one product per
// matrix, parallel[0] the matrix e, and every read of the output after it is at [group(m), m, ...] (m the row axis).
// Points with e != group(m) are never read, so a schedule may leave them unwritten (a tiled product skips every tile
// whose rows all belong to other matrices). `group` is an index over parallel[rowAxis]'s variable alone, with values in
// [0, extent of parallel[0]), nondecreasing in it (rows sorted by group): a tile of rows [m0, m1] holds the groups
// group(m0) .. group(m1). Printed after the store: `read only at ex = GROUP`.
struct ReadOnlyAt {
  int rowAxis = -1;  // position of m in Kernel::parallel
  Idx group;         // over parallel[rowAxis].var
};

struct Kernel {
  std::string name;
  int output = -1;                   // buffer written at [p0, ..., pn-1]
  std::vector<Axis> parallel;        // one per output dim
  int rowAxes = 0;                   // stages depend on parallel[0 .. rowAxes) only
  std::vector<Reduction> stages;     // empty for elementwise kernels
  ExprP result;                      // may reference every stage's accumulator
  std::optional<OnlineSoftmax> attention;  // set: stages are empty and the result reads acc0 as above
  std::optional<ReadOnlyAt> readOnlyAt;    // set: points of the output with parallel[0] != group(m) are never read
  std::vector<std::string> origins;  // Torch ops this kernel holds, in program order

  VarExtents extents() const;
  int64_t parallelPoints() const;
  int64_t rowPoints() const;         // points of the row axes
  int64_t iterations() const;        // result evaluations plus every stage's reduction steps
  int maxVar() const;                // largest variable id used by an axis
};

// Every expression of k (stages, attention parts, result) replaced by f(expression).
void mapKernelExprs(Kernel& k, const std::function<ExprP(const ExprP&)>& f);
// Every expression of k, in the order above.
void forEachKernelExpr(const Kernel& k, const std::function<void(const ExprP&)>& f);

// Whether e has one value per row of kernel k: every index it reads uses only the row axes' variables (the stages'
// totals, RMSNorm's rsqrt(mean + eps), softmax's 1 / sum).
bool rowInvariant(const ExprP& e, const Kernel& k);
// Whether e reads a stage's total (an accumulator).
bool readsTotal(const ExprP& e);
// Whether k has two stages or more, each reducing one axis of one extent and none reading a total: sums one walk of
// that axis can take together (tile-walk-stages-together).
bool stagesIndependent(const Kernel& k);

struct Program {
  std::string modelName;
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;       // in launch order
  std::vector<int> inputs, outputs;  // buffer ids
};

std::string print(const Program& p);
// The lines print() begins and ends with: a `buffer` line per buffer, and `return OUTPUTS`.
std::string printBuffers(const Program& p);
std::string printReturn(const Program& p);
// The loop nest of one kernel (axes, reduction, store), as print() shows it.
std::string printKernelBody(const Program& p, const Kernel& k);
nlohmann::json toJson(const Program& p);
void verify(const Program& p);

// Runs the program on the CPU: one value per input buffer, returns the output buffers.
std::vector<HostTensor> interpret(const Program& p, const std::vector<HostTensor>& inputs);
float evalExpr(const Expr& e, const std::vector<int64_t>& env, const std::vector<std::vector<float>>& buffers,
               const std::vector<Buffer>& info, const std::vector<float>& accs, const IndexLoader* loader);
float roundTo(DType t, float v);

// Passes
Program lowerFromTensor(const tensor::Graph& g);  // loop-lower-from-tensor
bool fuseProducers(Program& p);                   // loop-fuse-producers
bool eliminateDeadBuffers(Program& p);            // loop-eliminate-dead-buffers
// Only the buffers no kernel reads or writes (keeps every kernel, so lists parallel to the kernels stay valid).
bool eliminateUnusedBuffers(Program& p);

// The fusion rule, exposed for --explain-fusion and tests: why producer kernel `producer` is not inlined
// into its consumers, or empty when it may be.
std::string fusionRefusal(const Program& p, int producer);
constexpr int64_t kMaxFusionWorkGrowth = 8;
// Operations (as a tree: shared subexpressions counted at every use) a fused kernel's expressions may hold.
constexpr int64_t kMaxFusedApplies = 512;
// e with every load of the producer's output replaced by the producer's result at that load's indices
// (`consumerExtents`: the consumer's variables, for simplifying the substituted indices).
ExprP inlineProducer(const ExprP& e, const Kernel& producer, const VarExtents& consumerExtents);
// The producer's Torch ops followed by the consumer's not already among them (a fused kernel's origins).
std::vector<std::string> mergeOrigins(const std::vector<std::string>& producer, const std::vector<std::string>& consumer);
// The states (the last `states` inputs and outputs, pairwise: a state's current value and its new one) whose new value
// may be written over the bytes of the current one, as (output, input) buffer pairs: the output is written by one
// kernel, without stages or attention, that reads the input only at the point it writes (each thread reads an element
// before writing it, no other thread reads it), and no later kernel reads the input. A decoder step's KV cache
// (index_copy: where(j == position, new, cache[..j..])) and its position counter are such states.
std::vector<std::pair<int, int>> inPlaceStates(const Program& p, size_t states);
// For --explain-fusion, one per kernel: when the kernel is the p·v of a softmax(q·kᵀ)·v that loop-fuse-attention would
// make one kernel but for its operands (f32, computed, not contiguous...), why; empty otherwise.
std::vector<std::string> attentionFusionRefusals(const Program& p);
bool fuseEpilogues(Program& p);                   // loop-fuse-epilogues
bool fuseRows(Program& p);                        // loop-fuse-rows
bool fuseNormProducts(Program& p);                // loop-fuse-norm-products
bool reciprocalRowDivisors(Program& p);           // loop-reciprocal-row-divisors
bool maskPredicates(Program& p);                  // loop-mask-predicates
bool indexComparisons(Program& p);                // loop-index-comparisons
bool fuseAttention(Program& p);                   // loop-fuse-attention
bool batchExpertProducts(Program& p);             // loop-batch-expert-products
// For `kiln compile --explain-fusion`: each kernel's Torch ops, and for every kernel whose buffer other
// kernels read, why it was not fused into them.
std::string explainFusion(const Program& p);
// Every buffer read by kernel k (loads and index reads, in its stages and result, and those of its readOnlyAt group).
void forEachKernelRead(const Kernel& k, const std::function<void(int buffer, bool asIndex)>& f);
// For every buffer, the kernels (indices, ascending, each once) that read it.
// Kernels are live when an output depends on what they write (the others are left by fusion for
// loop-eliminate-dead-buffers). With `live`, only live kernels count as readers.
std::vector<bool> liveKernels(const Program& p);
std::vector<std::vector<int>> readersOfBuffers(const Program& p, const std::vector<bool>* live = nullptr);

}  // namespace kiln::loop
