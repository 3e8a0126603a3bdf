// Tensor IR: a DAG of primitives (DESIGN.md §1).
//
//   Elementwise(fn)   out[i] = fn(in0[i], in1[i], ...)   operands share the output's shape (broadcasts are
//                     explicit IndexMaps); operands may also be f32 immediates
//   Reduce(fn, axes)  out = fn over `axes` of in0, reduced axes kept with extent 1 (keepdim)
//   IndexMap          out[o0..on] = in0[index[0](o), ..., index[k](o)]: view, transpose, permute, slice,
//                     expand, broadcast, squeeze... all pure data movement as one index function
//   Gather            out[i.., j] = in0[clamp(in1[i..]), j] (embedding: table [n, d], integer ids)
//   Concat(axis)      out = the operands laid one after another along `axis`
//   AllReduce         out = the sum over the ranks of a tensor-parallel program of in0 (tensor-shard; one rank: in0)
//
// A matrix product stays recognisable as a contraction: Reduce(sum, k) of Elementwise(mul) of two
// IndexMaps that broadcast both operands to [.., m, n, k].
#pragma once
#include <optional>
#include <string_view>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kiln/support/dtype.h"
#include "kiln/support/host_tensor.h"
#include "kiln/support/index_expr.h"
#include "kiln/torch/ir.h"

namespace kiln::tensor {

// Scalar functions shared by every level below (Loop, Kernel, the interpreters and the CUDA emitter).
enum class Fn {
  // unary
  Neg, Exp, Exp2, Rsqrt, Sqrt, Relu, Silu, Sigmoid, Tanh, Gelu, GeluTanh, Cast, Cos, Sin, Not, Abs,
  // binary
  Add, Sub, Mul, Div, Pow, Max, Min, Lt, Le, Gt, Ge, Eq, Ne, And,
  // ternary
  Where,  // a != 0 ? b : c
};
// Exp2 (2 to the a) is made by kernel lowerings only (flash attention's softmax in base 2, the scale folded into the
// exponent's multiply-add); no Torch op lowers to it.
int arity(Fn f);
const char* fnName(Fn f);
// The function fnName calls `name`; nullopt for none (the IR parsers).
std::optional<Fn> fnByName(std::string_view name);
float applyFn(Fn f, float a, float b = 0.f, float c = 0.f);  // the reference semantics of each function in f32

enum class ReduceFn { Sum, Max };
const char* reduceName(ReduceFn f);
float reduceInit(ReduceFn f);
float reduceCombine(ReduceFn f, float acc, float v);

struct Operand {
  int node = -1;    // producing node id, or -1 for an immediate
  float imm = 0.f;
  bool isImm() const { return node < 0; }
};

struct Node {
  enum class Kind { Input, Weight, Elementwise, Reduce, IndexMap, Gather, Concat, AllReduce };
  Kind kind;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<Operand> operands;   // Elementwise: fn's operands; others: operands[0] (Gather: table, ids)
  Fn fn = Fn::Add;                 // Elementwise
  ReduceFn reduceFn = ReduceFn::Sum;
  std::vector<int> axes;           // Reduce: reduced axes (sorted); Concat: {axis}
  std::vector<Idx> index;          // IndexMap: one expression per input dim over vars o0..o{rank-1} (ids 0..)
  std::string name;                // Input/Weight name
  std::shared_ptr<const torch::WeightData> weight;
  std::string origin;              // "aten::softmax @ models/softmax.py:9": the Torch op it came from
  std::string traced;              // the TorchScript value it equals (torch::Value::traced), or empty
};

struct Graph {
  std::string modelName;
  std::vector<Node> nodes;         // topologically ordered; ids are indices
  std::vector<int> inputs, outputs;

  int add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
};

// The output-index variable for axis d of an IndexMap (id d, named "o<d>").
Idx outVar(int d);

std::string print(const Graph& g);
nlohmann::json toJson(const Graph& g);
void verify(const Graph& g);

// Passes (passes/tensor/*.cpp)
Graph lowerFromTorch(const torch::Graph& g);   // tensor-lower-from-torch
bool composeIndexMaps(Graph& g);               // tensor-compose-index-maps
bool foldConstants(Graph& g);                  // tensor-fold-constants
bool foldIndexWraps(Graph& g);                 // tensor-fold-index-wraps
bool mergeParallelLinears(Graph& g);           // tensor-merge-parallel-linears
bool eliminateDeadCode(Graph& g);              // tensor-eliminate-dead-code

// tensor-shard (passes/tensor/shard.cpp, docs/tensor-parallel.md): rank `rank` of the model split over `ranks` devices,
// Megatron style. The weights of the projections named q_proj, k_proj, v_proj, gate_proj and up_proj are split by
// their output rows; the split follows the values through the graph (each rank computes its heads and its slice of
// the intermediate, biases and the weights meeting them split along), and a sum over a split axis (o_proj's and
// down_proj's products) becomes a partial sum followed by an AllReduce. Everything else is computed whole on every
// rank. Every rank's graph has the same nodes and shapes; only the weights' values differ. Refused in one line
// (UserError) where the split cannot follow: a count that does not divide a split extent, an input or output that
// would be split, a maximum or a concatenation over a split axis.
void shardForTensorParallel(Graph& g, int ranks, int rank);

// The reference evaluation of a graph on the CPU, in f32 (integers and booleans as exact floats): every node, in
// order. `ranks` holds one graph per rank of a tensor-parallel program (tensor-shard: the same nodes, each rank's
// weights), evaluated side by side, an AllReduce summing its operand over them; one graph is an ordinary evaluation.
// Returns rank 0's outputs. For tests and checks of the Tensor level; the kernels' interpreters are the Kernel level's.
std::vector<HostTensor> evaluate(const std::vector<const Graph*>& ranks, const std::vector<HostTensor>& inputs);

// Names of the aten ops tensor-lower-from-torch supports (for docs and error messages).
std::vector<std::string> supportedOps();

}  // namespace kiln::tensor
