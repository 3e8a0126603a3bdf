// Loop IR: one node is one kernel-to-be (DESIGN.md §1): a loop nest over named axes that loads, computes,
// optionally reduces, and writes one buffer.
//
//   kernel k3 writes t3[p0, p1, p2]            parallel axes p0.. span the output buffer's shape
//     reduce sum over r0 < 64: value(p, r)     optional; its result is `acc`
//     t3[p0, p1, p2] = result(p, acc)
//
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
  enum class Kind { Input, Weight, Temp, Output };
  Kind kind = Kind::Temp;
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::shared_ptr<const torch::WeightData> weight;  // Weight buffers
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
  Fn fn = Fn::Add;            // Apply
  DType castTo = DType::F32;  // Apply(Cast): rounds to this type
  std::vector<ExprP> args;    // Apply; Select: {value if lhs < rhs, value otherwise}
};
ExprP load(int buffer, std::vector<Idx> index);
ExprP imm(float v);
ExprP apply(Fn fn, std::vector<ExprP> args);
ExprP accRef();
// lhs < rhs ? a : b, the condition on indices only (concatenation).
ExprP select(Idx lhs, Idx rhs, ExprP a, ExprP b);
// Every buffer an expression reads: its loads, and index values read from memory inside their indices.
void forEachBufferRead(const ExprP& e, const std::function<void(int buffer, bool asIndex)>& f);
// Renumbers every buffer an expression reads.
ExprP renumberBuffers(const ExprP& e, const std::function<int(int)>& newId);
// Structural key: equal keys <=> equal expressions (used for common-subexpression sharing).
std::string exprKey(const ExprP& e);
// Rewrites every Load's index and buffer through f (returns a new tree).
ExprP mapLoads(const ExprP& e, const std::function<ExprP(const Expr& load)>& f);
void forEachLoad(const ExprP& e, const std::function<void(const Expr& load)>& f);
// Rewrites every index expression (load indices and select conditions) through f.
ExprP mapIndices(const ExprP& e, const std::function<Idx(const Idx&)>& f);
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

struct Kernel {
  std::string name;
  int output = -1;                   // buffer written at [p0, ..., pn-1]
  std::vector<Axis> parallel;        // one per output dim
  std::optional<Reduction> reduction;
  ExprP result;                      // may reference `acc` when there is a reduction
  std::vector<std::string> origins;  // Torch ops this kernel holds, in program order

  VarExtents extents() const;
  int64_t parallelPoints() const;
  int64_t iterations() const;        // parallel points x reduction points
};

struct Program {
  std::string modelName;
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;       // in launch order
  std::vector<int> inputs, outputs;  // buffer ids
};

std::string print(const Program& p);
// The loop nest of one kernel (axes, reduction, store), as print() shows it.
std::string printKernelBody(const Program& p, const Kernel& k);
nlohmann::json toJson(const Program& p);
void verify(const Program& p);

// Runs the program on the CPU: one value per input buffer, returns the output buffers.
std::vector<HostTensor> interpret(const Program& p, const std::vector<HostTensor>& inputs);
float evalExpr(const Expr& e, const std::vector<int64_t>& env, const std::vector<std::vector<float>>& buffers,
               const std::vector<Buffer>& info, float acc, const IndexLoader* loader);
float roundTo(DType t, float v);

// Passes
Program lowerFromTensor(const tensor::Graph& g);  // loop-lower-from-tensor
bool fuseProducers(Program& p);                   // loop-fuse-producers
bool eliminateDeadBuffers(Program& p);            // loop-eliminate-dead-buffers

// The fusion rule, exposed for --explain-fusion and tests: why producer kernel `producer` is not inlined
// into its consumers, or empty when it may be.
std::string fusionRefusal(const Program& p, int producer);
constexpr int64_t kMaxFusionWorkGrowth = 8;

}  // namespace kiln::loop
