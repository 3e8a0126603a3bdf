// Torch IR: one aten op per node, with static shapes and dtypes (DESIGN.md §1).
//
// Produced by the frontend (kiln/frontend/import.h) from a TorchScript module specialised to its input
// shapes: everything that is fixed once shapes are fixed (sizes, integer arithmetic, lists, tensors built
// only from constants) is already folded, so every node here does tensor work. Non-tensor operands are
// Constant values printed inline. Weights are values whose data lives once in a shared weight store.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <variant>
#include <vector>

#include "kiln/support/dtype.h"

namespace kiln::torch {

struct SourceLoc {
  std::string file;  // as recorded by TorchScript, shortened to start at "models/" where it can
  int line = 0;
  std::string str() const;  // "models/mlp.py:14", or "<unknown location>"
};

struct None {};
using Scalar = std::variant<None, bool, int64_t, double, std::vector<int64_t>, std::vector<double>, std::string>;
std::string scalarString(const Scalar& s);

struct WeightData {
  std::string name;                 // e.g. "fc.weight"
  std::vector<float> values;        // stored in f32; the Value's dtype says how kernels store it
};

struct Value {
  enum class Kind { Input, Weight, Tensor, Constant };
  Kind kind = Kind::Tensor;
  std::string name;                 // inputs: the recorded input name; others: empty
  DType dtype = DType::F32;         // tensors
  Shape shape;                      // tensors
  Scalar constant;                  // Constant values
  std::shared_ptr<const WeightData> weight;  // Weight values (shared, never copied per pass)
  // Tensors a node computes: the TorchScript value of the frozen, inlined forward whose values these are, where exactly
  // one is ("aten::add#57.0": the kind, place and output of its node; src/frontend/torch_util.h), empty otherwise. What
  // `kiln run --check --bisect` asks LibTorch for.
  std::string traced;
  bool isTensor() const { return kind != Kind::Constant; }
};

struct Node {
  std::string op;                   // "aten::linear"
  std::vector<int> inputs;          // value ids
  std::vector<int> outputs;         // value ids (tensor results)
  SourceLoc loc;
};

// Model state (DESIGN.md §7): a module buffer the forward changes in place (a static KV cache). The forward reads
// the state's current values as the input `input` and returns its new values as the output `output`; the caller
// keeps them for the next forward, starting from `initial` (the buffer's values in the archive).
struct State {
  std::string name;                          // the module attribute's path, "w.key_cache_0"
  int input = -1, output = -1;               // value ids, also listed in Graph::inputs and Graph::outputs
  std::shared_ptr<const WeightData> initial;
};

struct Graph {
  std::string modelName;
  std::vector<Value> values;
  std::vector<Node> nodes;          // topologically ordered
  std::vector<int> inputs, outputs; // value ids; the states' come after the forward's own, in `states` order
  std::vector<State> states;
  // Names of the forward's first outputs (the key of a dict's value, as a transformers ModelOutput traced with
  // strict=False returns them; empty for the others): the Loop lowering names their buffers after them.
  std::vector<std::string> outputNames;

  int addValue(Value v) {
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
  }
};

std::string print(const Graph& g);
nlohmann::json toJson(const Graph& g);
void verify(const Graph& g);  // throws InternalError

// Passes
bool eliminateDeadCode(Graph& g);  // torch-eliminate-dead-code
// The forward's second output becomes the argmax over the last axis of its first (the logits): the greedy token at
// every position, i64 (PipelineOptions::greedyTokens; passes/torch/greedy_token.cpp). UserError where the first output
// is not logits.
bool appendGreedyToken(Graph& g);

}  // namespace kiln::torch
