// torch-import: TorchScript archive -> Torch IR specialised to the input shapes (see frontend.h).
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"
#include "kiln/tensor/op_catalog.h"
#include "model_inputs.h"
#include "import_eval.h"
#include "model_state.h"
#include "torch_util.h"

namespace kiln::frontend {
namespace jit = ::torch::jit;
using kiln::torch::Graph;
using kiln::torch::Scalar;
using kiln::torch::SourceLoc;
using kiln::torch::Value;

namespace {

class Importer {
 public:
  Importer(std::string path, std::string modelName, std::optional<DType> castTo, const jit::Module& module)
      : path_(std::move(path)), castTo_(castTo) {
    g_.modelName = std::move(modelName);
    for (const auto& p : module.named_parameters(/*recurse=*/true)) nameStorage(p.name, p.value);
    for (const auto& b : module.named_buffers(/*recurse=*/true)) nameStorage(b.name, b.value);
  }

  Graph run(const jit::Module& frozen, jit::Graph& graph, const std::vector<InputSpec>& specs,
            const std::vector<at::Tensor>& inputs) {
    auto gin = graph.inputs();
    env_[gin[0]] = frozen._ivalue();  // `self`: its attributes are read with prim::GetAttr
    for (const std::string& name : stateNames(graph)) states_[name] = StateVersions{};
    for (size_t i = 0; i < specs.size(); ++i) {
      const jit::Value* v = gin[i + 1];
      Value val;
      val.kind = Value::Kind::Input;
      val.name = specs[i].name;
      val.dtype = specs[i].dtype;
      val.shape = specs[i].shape;
      ids_[v] = {g_.addValue(val)};
      g_.inputs.push_back(ids_[v][0]);
      env_[v] = inputs[i];
      dynamic_.insert(v);
    }
    for (jit::Node* node : graph.nodes()) visit(node);
    for (const jit::Value* out : graph.outputs()) {
      refuseInt32Outputs(env_.at(out));
      for (int id : idsOf(out, nullptr)) {
        g_.outputs.push_back(id);
        auto key = keyOf_.find(id);
        g_.outputNames.push_back(key != keyOf_.end() ? key->second : "");
      }
    }
    for (kiln::torch::State& st : g_.states) {  // the states' last versions close the outputs
      st.output = states_.at(st.name).current;
      g_.outputs.push_back(st.output);
    }
    nameTracedValues(graph);
    return std::move(g_);
  }

 private:
  // Value::traced: each tensor a node computed gets the key (tracedValueKey) of the first TorchScript value, in graph
  // order, that maps to it alone and has its shape; a state's versions and the model's inputs and weights get none.
  void nameTracedValues(jit::Graph& graph) {
    int64_t ordinal = 0;
    for (const jit::Node* node : graph.nodes()) {
      if (node->kind() == c10::prim::Constant) continue;
      ++ordinal;
      for (const jit::Value* out : node->outputs()) {
        auto ids = ids_.find(out);
        auto value = env_.find(out);
        if (ids == ids_.end() || ids->second.size() != 1 || value == env_.end() || !value->second.isTensor() ||
            stateAlias_.count(out))
          continue;
        Value& v = g_.values[static_cast<size_t>(ids->second[0])];
        if (v.kind == Value::Kind::Tensor && v.traced.empty() && v.shape == value->second.toTensor().sizes().vec())
          v.traced = tracedValueKey(node, ordinal, out);
      }
    }
  }

  void visit(jit::Node* node) {
    std::string op = node->kind().toQualString();
    if (node->kind() == c10::prim::Constant) {
      for (const jit::Value* out : node->outputs()) env_[out] = *jit::toIValue(out);
      return;
    }
    if (!node->blocks().empty())
      userError("{} at {}: control flow in the traced graph is not supported; trace the model with torch.jit.trace",
                op, sourceLoc(node).str());
    if (node->kind() == c10::prim::GetAttr) return readAttribute(node);
    jit::Stack stack;
    bool dyn = false;
    for (const jit::Value* in : node->inputs()) {
      auto it = env_.find(in);
      if (it == env_.end()) refuseUnimported(node, in);
      stack.push_back(it->second);
      dyn = dyn || dynamic_.count(in);
    }
    if (dyn && writesFirstOperand(node) && stateOf(node->input(0))) return writeState(node, stack);
    if (dyn) refuseOtherInPlace(node);
    if (dyn) refuseDataDependentShape(node);
    dyn = evaluate(node, stack, dyn);
    auto outs = node->outputs();
    for (size_t i = 0; i < outs.size(); ++i) env_[outs[i]] = stack[i];
    dyn = dyn && !shapeOnly(node);
    if (!dyn) return;  // folded: a constant, looked up lazily when used
    refusePinnedDtype(node);
    for (const jit::Value* out : outs) dynamic_.insert(out);
    if (op == "prim::TupleConstruct" || op == "prim::ListConstruct") {
      std::vector<int> elems;
      for (const jit::Value* in : node->inputs())
        for (int id : idsOf(in, node)) elems.push_back(id);
      ids_[outs[0]] = elems;
      return;
    }
    if (op == "prim::DictConstruct") {  // its values in the dict's order (the keys are constant strings, the names)
      std::vector<int> elems;
      for (size_t i = 1; i < node->inputs().size(); i += 2)
        for (int id : idsOf(node->inputs()[i], node)) {
          elems.push_back(id);
          const c10::IValue& key = env_.at(node->inputs()[i - 1]);
          if (key.isString()) keyOf_.emplace(id, key.toStringRef());
        }
      ids_[outs[0]] = elems;
      return;
    }
    if (op == "prim::TupleUnpack" || op == "prim::ListUnpack") {
      auto elems = idsOf(node->inputs()[0], node);
      for (size_t i = 0; i < outs.size(); ++i) ids_[outs[i]] = {elems.at(i)};
      return;
    }
    if (splitsIntoParts(node) || indexIsASlice(node) || indexByTensors(node) || aliasesState(node) ||
        writesThroughViews(node) || complexAsPairs(node))
      return;
    kiln::torch::Node n{functionalForm(node), {}, {}, sourceLoc(node)};
    for (const jit::Value* in : node->inputs())
      for (int id : idsOf(in, node)) n.inputs.push_back(id);
    for (size_t i = 0; i < outs.size(); ++i) {
      const c10::IValue& v = env_.at(outs[i]);
      if (!v.isTensor())
        userError("{} at {} computes a {} from input data; kiln needs such values to follow from shapes alone", op,
                  n.loc.str(), v.tagKind());
      int id = tensorValue(v.toTensor(), op, n.loc);
      ids_[outs[i]] = {id};
      n.outputs.push_back(id);
    }
    g_.nodes.push_back(std::move(n));
  }

  // Runs `node` on `stack` (its operands) with LibTorch, leaving its results there: on meta tensors when it works on
  // input data (`dyn`), for real when it folds. Returns whether its results are still input data (a metadata-only op
  // of input data, new_ones and the like, folds to a constant).
  bool evaluate(jit::Node* node, jit::Stack& stack, bool dyn) {
    const std::string op = node->kind().toQualString();
    try {
      if (node->kind() == c10::prim::TupleConstruct) {
        std::vector<c10::IValue> elems(stack.begin(), stack.end());
        stack = {c10::ivalue::Tuple::create(std::move(elems))};
      } else if (node->kind() == c10::prim::ListConstruct) {
        stack = {makeList(stack, node)};
      } else if (node->kind() == c10::prim::DictConstruct) {  // a ModelOutput traced with strict=False: keys, values
        c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
        for (size_t i = 0; i + 1 < stack.size(); i += 2) dict.insert_or_assign(stack[i], stack[i + 1]);
        stack = {c10::IValue(dict)};
      } else if (node->kind() == c10::prim::TupleUnpack) {
        auto elems = stack.at(0).toTupleRef().elements().vec();
        stack.assign(elems.begin(), elems.end());
      } else if (node->kind() == c10::prim::ListUnpack) {
        auto elems = stack.at(0).toListRef().vec();
        if (elems.size() != node->outputs().size())
          throw std::runtime_error(fmt::format("a list of {} unpacked into {} values", elems.size(), node->outputs().size()));
        stack.assign(elems.begin(), elems.end());
      } else if (dyn && metadataOnly(node)) {
        // new_ones(x, ...), zeros_like(x), full_like(x, v), ...: only x's shape and dtype matter, so the result is
        // a constant, computed on a stand-in of x's shape and dtype.
        for (c10::IValue& v : stack)
          if (v.isTensor() && v.toTensor().is_meta())
            v = at::zeros(v.toTensor().sizes(), at::TensorOptions().dtype(v.toTensor().scalar_type()));
        node->getOperation()(stack);
        if (node->kind() == c10::aten::new_empty || node->kind() == c10::aten::empty_like)  // uninitialized: zeros
          for (c10::IValue& v : stack) v = at::zeros_like(v.toTensor());
        dyn = false;
      } else if (dyn) {
        evaluateOnMeta(node, stack);
      } else {
        node->getOperation()(stack);
      }
    } catch (const std::exception& e) {
      if (castTo_ && dyn) refuseRecast(node, fmt::format("fails on the recast values ({})", firstLine(e.what())));
      userError("{} at {} fails for the given inputs ({}); check the input shapes and dtypes (recorded, --input, --dtype; a traced model may fix its dtypes: export it in the dtype you want)", op,
                sourceLoc(node).str(), firstLine(e.what()));
    }
    return dyn;
  }

  // split / split_with_sizes / chunk / unsafe_chunk / unsafe_split / unbind of input data: the list they make
  // becomes one aten::slice (aten::select for unbind) per part, with the part's offset along `dim` taken from the
  // shapes LibTorch computed, so prim::ListUnpack (or a list given to cat) sees ordinary tensors. False for any
  // other node.
  bool splitsIntoParts(jit::Node* node) {
    static const std::unordered_set<std::string> splits = {"aten::split", "aten::split_with_sizes", "aten::chunk",
                                                           "aten::unsafe_chunk", "aten::unsafe_split", "aten::unbind"};
    std::string op = node->kind().toQualString();
    if (!splits.count(op) || node->outputs().size() != 1 || !env_.at(node->output()).isTensorList()) return false;
    const jit::Value* x = node->inputs()[0];
    std::optional<int64_t> dimArg;
    if (const c10::FunctionSchema* schema = node->maybeSchema())
      for (size_t i = 0; i < schema->arguments().size() && i < node->inputs().size(); ++i)
        if (schema->arguments()[i].name() == "dim") dimArg = env_.at(node->inputs()[i]).toInt();
    if (!dimArg) userError("{} at {}: no constant dim to split along", op, sourceLoc(node).str());
    const int64_t rank = env_.at(x).toTensor().dim();
    const int64_t dim = *dimArg < 0 ? *dimArg + rank : *dimArg;
    const bool unbind = op == "aten::unbind";
    std::vector<int> parts;
    int64_t start = 0;
    int xId = idsOf(x, node).at(0);
    for (const at::Tensor& part : env_.at(node->output()).toTensorList().vec()) {
      const int64_t length = unbind ? 1 : part.size(dim);
      if (length == 0)  // its slice would index x past its end (an empty slice that a cat drops is fine elsewhere)
        userError("{} at {} makes part {} with no elements (shape [{}]); kiln has no split parts of size 0: leave the "
                  "empty part out of the model", op, sourceLoc(node).str(), parts.size(), shapeText(part));
      kiln::torch::Node n{unbind ? "aten::select" : "aten::slice", {}, {}, sourceLoc(node)};
      n.inputs = unbind ? std::vector<int>{xId, constantValue(dim), constantValue(start)}
                        : std::vector<int>{xId, constantValue(dim), constantValue(start), constantValue(start + length), constantValue(1)};
      n.outputs.push_back(tensorValue(part, op, n.loc));
      parts.push_back(n.outputs.back());
      g_.nodes.push_back(std::move(n));
      start += length;
    }
    ids_[node->output()] = parts;
    return true;
  }

  // With --dtype, the recast model must compute in that dtype throughout: a trace that casts input data to a fixed
  // floating type (transformers' RMSNorm computes in f32 and casts back to the dtype it was traced in, now a
  // constant), or mixes the recast values with floating constants it made in the traced dtype (rotary tables),
  // computes in f32 again or fails inside LibTorch. Either is stopped here, before any work, saying how to get the
  // model in that dtype.
  [[noreturn]] void refuseRecast(const jit::Node* node, const std::string& what) {
    userError("{}: --dtype {} cannot recast this trace: {} at {} {}; trace the model in {} instead (model.to(torch.{}) "
              "before torch.jit.trace)", path_, dtypeName(*castTo_), node->kind().toQualString(), sourceLoc(node).str(),
              what, dtypeName(*castTo_), *castTo_ == DType::BF16 ? "bfloat16" : "float16");
  }
  void refusePinnedDtype(const jit::Node* node) {
    if (!castTo_) return;
    for (const jit::Value* out : node->outputs()) {
      const c10::IValue& v = env_.at(out);
      if (!v.isTensor() || !v.toTensor().is_floating_point()) continue;
      std::string type = floatName(v.toTensor().scalar_type());
      if (type != dtypeName(*castTo_))
        refuseRecast(node, fmt::format("computes {} from the recast values (the trace fixes that dtype)", type));
    }
  }
  static std::string floatName(c10::ScalarType t) {
    switch (t) {
      case at::kFloat: return "f32";
      case at::kHalf: return "f16";
      case at::kBFloat16: return "bf16";
      default: return c10::toString(t);
    }
  }

  // aten::NAME_ (not a dunder such as __and__): an op that changes its first operand in place.
  static bool inPlaceName(const std::string& op) {
    return op.rfind("aten::", 0) == 0 && op.size() > 7 && op.back() == '_' && op[op.size() - 2] != '_';
  }
  // The in-place ops functionalForm rewrites to their out-of-place forms where that is safe: those whose out-of-place
  // form the Tensor lowering takes (add_, clamp_, masked_fill_, relu_, ...; the op catalog says which).
  static bool rewrittenInPlace(const std::string& op) {
    static const std::unordered_set<std::string> lowered = [] {
      std::unordered_set<std::string> names;
      for (const tensor::OpEntry& e : tensor::opCatalog())
        if (!e.atImport) names.insert(e.name);
      return names;
    }();
    return inPlaceName(op) && lowered.count(op.substr(0, op.size() - 1));
  }

  // Any other in-place op on input data (aten::embedding_renorm_, which nn.Embedding(max_norm=...) runs on its table at
  // every call) is refused before it is evaluated: its result is often unused, so dead-code elimination would drop the
  // change silently.
  static void refuseOtherInPlace(const jit::Node* node) {
    const std::string op = node->kind().toQualString();
    if (!inPlaceName(op) || rewrittenInPlace(op)) return;
    userError("{} at {} changes a tensor in place, which kiln does not support (its values are never mutated){}", op,
              sourceLoc(node).str(),
              op == "aten::embedding_renorm_"
                  ? ": nn.Embedding(max_norm=...) renormalizes its table on every call; trace it without max_norm "
                    "(renormalize the weights once before tracing if the model needs it)"
                  : "; write the model with an out-of-place op");
  }

  // Ops whose result's shape, or a Python number, comes from the input's values (nonzero, one-argument where, unique,
  // masked_select, Int/item): a trace records them for the values it was traced on, and what follows (a loop over the
  // experts hit, a size) holds only for those. Refused before they are evaluated, naming the usual source.
  static void refuseDataDependentShape(const jit::Node* node) {
    static const std::unordered_set<std::string> ops = {"aten::nonzero", "aten::nonzero_numpy", "aten::argwhere",
                                                        "aten::masked_select", "aten::unique", "aten::_unique2",
                                                        "aten::unique_consecutive", "aten::Int", "aten::item",
                                                        "aten::_local_scalar_dense", "aten::bincount"};
    const std::string op = node->kind().toQualString();
    const bool nonzeroWhere = op == "aten::where" && node->inputs().size() == 1;
    if (!ops.count(op) && !nonzeroWhere) return;
    userError("{} at {} makes a shape or a number from the input's values, so the trace holds only for the values it "
              "was traced on (transformers' eager experts loop runs just the experts hit while tracing); kiln needs "
              "shapes that follow from the input shapes: for a mixture of experts set "
              "model.config._experts_implementation = \"grouped_mm\" (the default) or \"batched_mm\" before tracing",
              op, sourceLoc(node).str());
  }

  // A node whose operand no earlier node gave a value: the graph reads something the import does not model, usually a
  // module attribute that an op changes in place (so that freezing could not make it a constant): that op is named if
  // the graph has one, else the node and the value.
  [[noreturn]] static void refuseUnimported(const jit::Node* node, const jit::Value* in) {
    for (const jit::Node* n : node->owningGraph()->nodes()) refuseOtherInPlace(n);  // the usual cause, named
    const jit::Node* producer = in->node();
    userError("{} at {} reads %{} made by {} at {}, which kiln cannot import (an attribute changed in place?); see "
              "docs/ops.md", node->kind().toQualString(), sourceLoc(node).str(), in->debugName(),
              producer->kind().toQualString(), sourceLoc(producer).str());
  }

  // Whether `node`'s first result may share memory with an operand (a view: its schema gives the result alias info),
  // except an aten::to that changed the dtype (a copy; only the same dtype returns the operand itself).
  bool makesView(const jit::Node* node) const {
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (!schema || schema->returns().empty() || schema->returns()[0].alias_info() == nullptr) return false;
    if (node->kind() == c10::aten::to && !node->inputs().empty() && !node->outputs().empty()) {
      auto in = env_.find(node->inputs()[0]), out = env_.find(node->outputs()[0]);
      if (in != env_.end() && out != env_.end() && in->second.isTensor() && out->second.isTensor() &&
          in->second.toTensor().scalar_type() != out->second.toTensor().scalar_type())
        return false;
    }
    return true;
  }

  // Whether changing x in place at `node` is seen by no other reader: x is a fresh result (not an input, a weight or a
  // constant), no node reads it after `node`, and no node took a view of it or collected it into a list or tuple
  // (read again when unpacked). Where x is itself a view, the change reaches the tensor it views, which must pass
  // the same test, its view op `through` being the one view allowed (GPT-OSS's `bmm(...).squeeze(1).add_(bias)`).
  bool changeIsPrivate(const jit::Value* x, const jit::Node* node, const jit::Node* through = nullptr) const {
    const jit::Node* producer = x->node();
    if (producer->kind() == c10::prim::Param || producer->kind() == c10::prim::Constant ||
        producer->kind() == c10::prim::GetAttr)
      return false;
    for (const jit::Use& use : x->uses()) {
      if (use.user == node || use.user == through) continue;
      const auto k = use.user->kind();
      const bool collects = k == c10::prim::TupleConstruct || k == c10::prim::ListConstruct || k == c10::prim::DictConstruct;
      if (!use.user->isBefore(node) || makesView(use.user) || collects) return false;
    }
    return !makesView(producer) || changeIsPrivate(producer->inputs()[0], node, producer);
  }

  // Whether a node after `node` reads v, directly or through views of it.
  bool readAfter(const jit::Value* v, const jit::Node* node) const {
    for (const jit::Use& use : v->uses())
      if (!use.user->isBefore(node) || (makesView(use.user) && readAfter(use.user->output(), node))) return true;
    return false;
  }

  // Complex values of input data as real pairs (DeepSeek-V2's rotary: view_as_real(view_as_complex(x) * freqs_cis)):
  // view_as_complex(x) is x itself, [.., 2] holding (re, im); a product with a complex constant, another pair or a
  // real value is the pair of its real and imaginary parts, made of real ops and stacked on a last dim of 2;
  // view_as_real(z) is z's pair. Any other op on such a value is refused in one line. False for nodes on no complex
  // value.
  bool complexAsPairs(jit::Node* node) {
    const std::string op = node->kind().toQualString();
    const bool readsPair = std::any_of(node->inputs().begin(), node->inputs().end(),
                                       [&](const jit::Value* v) { return complexPairs_.count(v) > 0; });
    if (op == "aten::view_as_complex") {
      complexPairs_[node->output()] = idsOf(node->input(0), node).at(0);
      return true;
    }
    if (!readsPair) return false;
    if (op == "aten::view_as_real") {
      ids_[node->output()] = {complexPairs_.at(node->input(0))};
      return true;
    }
    if (op != "aten::mul")
      userError("{} at {} works on complex values, which kiln takes only as view_as_complex, a product and "
                "view_as_real (a rotary written with complex numbers)", op, sourceLoc(node).str());
    const SourceLoc loc = sourceLoc(node);
    const at::Tensor& result = env_.at(node->output()).toTensor();
    const std::vector<int64_t> shape = result.sizes().vec();
    auto add = [&](const char* name, std::vector<int> inputs, at::IntArrayRef sizes) {
      return addNode(name, std::move(inputs), sizes, at::kFloat, node);
    };
    // Each operand's (re, im): a pair's two slices, a complex constant's two parts, a real value and none.
    struct Parts {
      int re = -1, im = -1;
    };
    auto partsOf = [&](const jit::Value* v) {
      if (auto it = complexPairs_.find(v); it != complexPairs_.end()) {
        std::vector<int64_t> half = env_.at(v).toTensor().sizes().vec();
        return Parts{add("aten::select", {it->second, constantValue(-1), constantValue(0)}, half),
                     add("aten::select", {it->second, constantValue(-1), constantValue(1)}, half)};
      }
      const c10::IValue& iv = env_.at(v);
      if (iv.isTensor() && iv.toTensor().is_complex() && !dynamic_.count(v))
        return Parts{weightValue(at::real(iv.toTensor()).contiguous(), v, node), weightValue(at::imag(iv.toTensor()).contiguous(), v, node)};
      if (iv.isTensor() && iv.toTensor().is_complex())
        userError("aten::mul at {} multiplies complex values kiln did not make with view_as_complex", loc.str());
      return Parts{idsOf(v, node).at(0), -1};
    };
    const Parts a = partsOf(node->input(0)), b = partsOf(node->input(1));
    auto times = [&](int x, int y) { return add("aten::mul", {x, y}, shape); };
    int re = -1, im = -1;
    if (a.im >= 0 && b.im >= 0) {  // (ar + i ai)(br + i bi)
      re = add("aten::sub", {times(a.re, b.re), times(a.im, b.im), constantValue(1)}, shape);
      im = add("aten::add", {times(a.re, b.im), times(a.im, b.re), constantValue(1)}, shape);
    } else {  // one real factor r: (re r, im r)
      const Parts& z = a.im >= 0 ? a : b;
      const int r = a.im >= 0 ? b.re : a.re;
      re = times(z.re, r);
      im = times(z.im, r);
    }
    std::vector<int64_t> pair = shape;
    pair.push_back(2);
    complexPairs_[node->output()] = add("aten::stack", {re, im, constantValue(-1)}, pair);
    return true;
  }

  // An in-place op of rewrittenInPlace (copy_, add_, ...) writing through slices and selects of a fresh tensor that
  // later nodes read (DeepSeek-V3's `k = k_nope.new_empty(...); k[..., :n] = k_nope; k[..., n:] = k_rot`): the view's
  // new value is the functional op on the view taken of the tensor's current version, and the tensor's next version
  // is that value written back through each view by aten::slice_scatter / select_scatter; later readers of the tensor
  // (and of the op's result) get the new versions. Refused where a view of the tensor taken before the write is read
  // after it (it would have to see the change), or a view in the chain has another reader. False for other nodes.
  bool writesThroughViews(jit::Node* node) {
    const std::string op = node->kind().toQualString();
    if (!rewrittenInPlace(op) || changeIsPrivate(node->inputs()[0], node)) return false;
    std::vector<const jit::Node*> chain;  // the views from the written tensor outwards
    const jit::Value* base = node->inputs()[0];
    const jit::Node* through = node;
    while (base->node()->kind() == c10::aten::slice || base->node()->kind() == c10::aten::select) {
      for (const jit::Use& use : base->uses())
        if (use.user != through && !use.user->isBefore(node)) return false;
      chain.push_back(base->node());
      through = base->node();
      base = base->node()->inputs()[0];
    }
    const auto k = base->node()->kind();
    if (chain.empty() || k == c10::prim::Param || k == c10::prim::Constant || k == c10::prim::GetAttr || makesView(base->node()))
      return false;
    for (const jit::Use& use : base->uses())  // an earlier view of base (or a view of it) read after the write would miss it
      if (use.user != through && use.user->isBefore(node) && makesView(use.user) && readAfter(use.user->output(), node))
        userError("{} at {} writes into a tensor whose view {} at {} is read after the write; kiln compiles "
                  "functional graphs: take the view after writing", op, sourceLoc(node).str(),
                  use.user->kind().toQualString(), sourceLoc(use.user).str());
    const SourceLoc loc = sourceLoc(node);
    auto add = [&](const std::string& name, std::vector<int> inputs, const at::Tensor& like) {
      return addNode(name, std::move(inputs), like.sizes(), like.scalar_type(), node);
    };
    auto viewArgs = [&](const jit::Node* view) {
      std::vector<int> ids;
      for (size_t i = 1; i < view->inputs().size(); ++i) ids.push_back(idsOf(view->inputs()[i], view).at(0));
      return ids;
    };
    std::vector<int> versions{idsOf(base, node).at(0)};  // the current version of base, then of each view inwards
    for (size_t i = chain.size(); i-- > 0;) {
      std::vector<int> in{versions.back()};
      for (int id : viewArgs(chain[i])) in.push_back(id);
      versions.push_back(add(chain[i]->kind().toQualString(), in, env_.at(chain[i]->output()).toTensor()));
    }
    std::vector<int> in{versions.back()};
    for (size_t i = 1; i < node->inputs().size(); ++i)
      for (int id : idsOf(node->inputs()[i], node)) in.push_back(id);
    int written = add(op.substr(0, op.size() - 1), in, env_.at(node->output()).toTensor());
    ids_[node->output()] = {written};
    for (size_t i = 0; i < chain.size(); ++i) {  // innermost view first: write it into the version it was taken of
      const jit::Node* view = chain[i];
      const size_t parent = chain.size() - 1 - i;
      std::vector<int> args{versions[parent], written};
      for (int id : viewArgs(view)) args.push_back(id);
      const jit::Value* of = view->inputs()[0];
      written = add(view->kind() == c10::aten::slice ? "aten::slice_scatter" : "aten::select_scatter", args,
                    env_.at(of).toTensor());
    }
    ids_[base] = {written};
    dynamic_.insert(base);
    return true;
  }

  // An in-place op of rewrittenInPlace (aten::add_, clamp_, masked_fill_, ...) computes what its functional form does
  // when the change is private (changeIsPrivate): that form's name. Readers before it saw the old value, which the
  // functional form leaves as it was (Falcon's `attn_output += ...` on a matmul's output; Mixtral's router
  // `top_value /= top_value.sum(-1, keepdim=True)`, whose sum reads it first). Otherwise the change would be visible
  // elsewhere, and kiln, whose values are never mutated, refuses it in one line. Other ops: their own name.
  std::string functionalForm(const jit::Node* node) {
    std::string op = node->kind().toQualString();
    if (!rewrittenInPlace(op)) return op;
    if (!changeIsPrivate(node->inputs()[0], node))
      userError("{} at {} changes a tensor that other values read or share; kiln compiles functional graphs: write the "
                "model with the out-of-place op ({})", op, sourceLoc(node).str(), op.substr(0, op.size() - 1));
    return op.substr(0, op.size() - 1);
  }

  // aten::index(x, [None, ..., i0, i1, ..., None, ...]) with integer index tensors at consecutive dims d0..d1, input
  // data (Mixtral's `gate_up_proj[expert_ids]`; BERT's padding mask read as `mask[batch_idx, kv_idx]`) or constants
  // indexIsASlice does not take. PyTorch broadcasts the index tensors to one shape I and returns
  // x.shape[:d0] + I + x.shape[d1+1:]. Made of: each index wrapped (negative entries plus the dim's size), their
  // linear position in the indexed dims (a sum of index * stride, broadcast to I), x with those dims moved first and
  // merged, aten::index_select of its rows at the positions (a gather that reads only the chosen rows), and a reshape
  // and permute back. Index tensors at dims a slice separates, or a boolean mask (a result whose shape depends on the
  // data), are refused in one line.
  bool indexByTensors(jit::Node* node) {
    if (node->kind() != c10::aten::index || node->inputs().size() != 2) return false;
    // The index list's entries: the values a ListConstruct made it of, or a constant list's elements.
    std::vector<c10::IValue> entries;
    std::vector<const jit::Value*> made;
    const jit::Node* list = node->inputs()[1]->node();
    if (list->kind() == c10::prim::ListConstruct) {
      for (const jit::Value* v : list->inputs()) {
        entries.push_back(env_.at(v));
        made.push_back(v);
      }
    } else if (env_.at(node->inputs()[1]).isList()) {
      for (const c10::IValue& e : env_.at(node->inputs()[1]).toListRef()) {
        entries.push_back(e);
        made.push_back(nullptr);
      }
    } else {
      return false;
    }
    const std::string at = sourceLoc(node).str();
    std::vector<int64_t> dims;
    for (size_t d = 0; d < entries.size(); ++d) {
      const c10::IValue& iv = entries[d];
      if (iv.isNone()) continue;
      if (!iv.isTensor() || iv.toTensor().is_floating_point()) return false;
      if (iv.toTensor().scalar_type() == at::kBool || iv.toTensor().scalar_type() == at::kByte)
        userError("aten::index at {} selects by a boolean mask, whose result's shape depends on the data; kiln needs "
                  "static shapes: use torch.where(mask, x, other) or masked_fill instead", at);
      if (!dims.empty() && dims.back() + 1 != static_cast<int64_t>(d))
        userError("aten::index at {} indexes dims {} and {} by tensors with a slice between them, which kiln does not "
                  "support; index them one after the other (x[i][:, :, j]) or use torch.gather", at, dims.back(), d);
      dims.push_back(static_cast<int64_t>(d));
    }
    if (dims.empty()) return false;
    const at::Tensor& x = env_.at(node->inputs()[0]).toTensor();
    const at::Tensor& result = env_.at(node->output()).toTensor();
    const SourceLoc loc = sourceLoc(node);
    auto add = [&](const char* op, std::vector<int> inputs, at::IntArrayRef sizes, c10::ScalarType type) {
      return addNode(op, std::move(inputs), sizes, type, node);
    };
    // The linear position of each index tuple within the indexed dims, broadcast to I.
    std::vector<at::Tensor> metas;
    for (int64_t d : dims) metas.push_back(entries[static_cast<size_t>(d)].toTensor().to(at::kMeta));
    const std::vector<int64_t> I = at::broadcast_tensors(metas)[0].sizes().vec();
    int64_t rows = 1, stride = 1;
    for (int64_t d : dims) rows *= x.size(d);
    int position = -1;
    for (size_t k = dims.size(); k-- > 0;) {
      const int64_t d = dims[k];
      const at::Tensor& idx = metas[k];
      const jit::Value* v = made[static_cast<size_t>(d)];
      const int id = v ? idsOf(v, node).at(0) : weightValue(entries[static_cast<size_t>(d)].toTensor(), node->inputs()[1], node);
      const int negative = add("aten::lt", {id, constantValue(0)}, idx.sizes(), at::kBool);
      const int shifted = add("aten::add", {id, constantValue(x.size(d)), constantValue(1)}, idx.sizes(), at::kLong);
      int wrapped = add("aten::where", {negative, shifted, id}, idx.sizes(), at::kLong);
      if (stride != 1) wrapped = add("aten::mul", {wrapped, constantValue(stride)}, idx.sizes(), at::kLong);
      position = position < 0 ? wrapped : add("aten::add", {position, wrapped, constantValue(1)}, I, at::kLong);
      stride *= x.size(d);
    }
    int64_t count = 1;
    for (int64_t v : I) count *= v;
    if (g_.values[static_cast<size_t>(position)].shape != I) position = add("aten::expand", {position, constantList(I), constantValue(0)}, I, at::kLong);
    const int flat = I.size() == 1 ? position : add("aten::reshape", {position, constantList({count})}, {count}, at::kLong);
    // x with the indexed dims first, merged: [rows, rest...]
    std::vector<int64_t> order(dims.begin(), dims.end()), rest;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (d < dims.front() || d > dims.back()) {
        order.push_back(d);
        rest.push_back(x.size(d));
      }
    int moved = idsOf(node->inputs()[0], node).at(0);
    std::vector<int64_t> movedSizes;
    for (int64_t d : order) movedSizes.push_back(x.size(d));
    if (dims.front() != 0) moved = add("aten::permute", {moved, constantList(order)}, movedSizes, x.scalar_type());
    std::vector<int64_t> merged{rows};
    merged.insert(merged.end(), rest.begin(), rest.end());
    if (merged != movedSizes) moved = add("aten::reshape", {moved, constantList(merged)}, merged, x.scalar_type());
    std::vector<int64_t> picked = merged;
    picked[0] = count;
    int out = add("aten::index_select", {moved, constantValue(0), flat}, picked, x.scalar_type());
    // [I..., rest...] and, where dims came before the indexed ones, those moved back in front of I.
    std::vector<int64_t> grouped(I.begin(), I.end());
    grouped.insert(grouped.end(), rest.begin(), rest.end());
    if (grouped != picked) out = add("aten::reshape", {out, constantList(grouped)}, grouped, x.scalar_type());
    if (dims.front() != 0) {
      const int64_t before = dims.front(), n = static_cast<int64_t>(I.size());
      std::vector<int64_t> back;
      for (int64_t i = 0; i < before; ++i) back.push_back(n + i);
      for (int64_t i = 0; i < n; ++i) back.push_back(i);
      for (int64_t i = n + before; i < static_cast<int64_t>(grouped.size()); ++i) back.push_back(i);
      out = add("aten::permute", {out, constantList(back)}, result.sizes(), x.scalar_type());
    }
    ids_[node->output()] = {out};
    return true;
  }

  // aten::index(x, [None, ..., idx, ...]) of input data with one constant index tensor whose values step evenly
  // (Falcon's fused_qkv[..., [-2], :]): the aten::slice it equals. False for any other node; other advanced indexing
  // of input data is refused by the caller's checks.
  bool indexIsASlice(jit::Node* node) {
    if (node->kind() != c10::aten::index || node->inputs().size() != 2 || dynamic_.count(node->inputs()[1])) return false;
    const c10::IValue& list = env_.at(node->inputs()[1]);
    if (!list.isList()) return false;
    int dim = -1;
    at::Tensor idx;
    auto elems = list.toListRef();
    for (size_t d = 0; d < elems.size(); ++d) {
      if (elems[d].isNone()) continue;
      if (dim >= 0 || !elems[d].isTensor()) return false;
      dim = static_cast<int>(d);
      idx = elems[d].toTensor();
    }
    if (dim < 0 || idx.dim() != 1 || idx.numel() == 0 || idx.is_floating_point() || idx.scalar_type() == at::kBool)
      return false;
    const at::Tensor& x = env_.at(node->inputs()[0]).toTensor();
    const int64_t size = x.size(dim);
    std::vector<int64_t> at;
    at::Tensor cpu = idx.to(at::kCPU).to(at::kLong).contiguous();
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      int64_t v = cpu.data_ptr<int64_t>()[i];
      at.push_back(v < 0 ? v + size : v);
    }
    const int64_t step = at.size() > 1 ? at[1] - at[0] : 1;
    for (size_t i = 0; i < at.size(); ++i)
      if (at[i] < 0 || at[i] >= size || at[i] != at[0] + static_cast<int64_t>(i) * step) return false;
    if (step <= 0) return false;
    kiln::torch::Node n{"aten::slice", {}, {}, sourceLoc(node)};
    n.inputs = {idsOf(node->inputs()[0], node).at(0), constantValue(dim), constantValue(at[0]), constantValue(at.back() + 1),
                constantValue(step)};
    n.outputs.push_back(tensorValue(env_.at(node->output()).toTensor(), "aten::index", n.loc));
    ids_[node->output()] = {n.outputs.back()};
    g_.nodes.push_back(std::move(n));
    return true;
  }

  // prim::GetAttr: a submodule (the start of a longer path), a tensor the forward changes (a state: at its first read
  // a new graph input holding its current values), or any other attribute, a constant as freezing makes them.
  void readAttribute(const jit::Node* node) {
    auto owner = env_.find(node->input(0));
    if (owner == env_.end() || !owner->second.isObject())
      userError("prim::GetAttr at {} reads attribute '{}' of something that is not a module; kiln reads the attributes of "
                "the traced module and its submodules only", sourceLoc(node).str(), node->s(c10::attr::name));
    c10::IValue value = owner->second.toObject()->getAttr(node->s(c10::attr::name));
    const jit::Value* out = node->output();
    std::optional<std::string> path = attributePath(out);
    if (!path || !states_.count(*path) || !value.isTensor()) {
      env_[out] = value;
      return;
    }
    StateVersions& st = states_.at(*path);
    if (st.current < 0) {
      const at::Tensor& t = value.toTensor();
      Value in;
      in.kind = Value::Kind::Input;
      in.name = *path;
      in.dtype = dtypeOf(t, "prim::GetAttr", sourceLoc(node));
      in.shape = t.sizes().vec();
      st.current = g_.addValue(in);
      st.meta = t.to(at::kMeta);
      g_.inputs.push_back(st.current);
      auto initial = std::make_shared<kiln::torch::WeightData>();
      initial->name = *path;
      at::Tensor f = t.detach().to(at::kCPU).to(at::kFloat).contiguous();
      initial->values.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
      g_.states.push_back(kiln::torch::State{*path, st.current, -1, std::move(initial)});
    }
    env_[out] = st.meta;
    dynamic_.insert(out);
    stateAlias_[out] = *path;
  }

  // The state whose memory v is or views; nullopt for any other value.
  std::optional<std::string> stateOf(const jit::Value* v) const {
    if (auto it = stateAlias_.find(v); it != stateAlias_.end()) return it->second;
    if (auto it = viewOf_.find(v); it != viewOf_.end()) return it->second;
    return std::nullopt;
  }

  // A result sharing a state's memory: the state itself when it changes nothing (a `to` of the same dtype, a reshape to
  // the same shape: later reads must see later writes, so no node is made and true is returned), or a view of it,
  // imported as usual but remembered: a later write of the state while the view is still to be read is refused.
  bool aliasesState(const jit::Node* node) {
    if (node->inputs().empty() || node->outputs().size() != 1 || !mayAliasFirstOperand(node) || writesFirstOperand(node))
      return false;
    std::optional<std::string> path = stateOf(node->input(0));
    const c10::IValue& result = env_.at(node->output());
    if (!path || !result.isTensor()) return false;
    const at::Tensor &in = env_.at(node->input(0)).toTensor(), &out = result.toTensor();
    if (out.scalar_type() != in.scalar_type()) return false;  // a converting `to` copies
    if (stateAlias_.count(node->input(0)) && out.sizes() == in.sizes()) {
      stateAlias_[node->output()] = *path;
      return true;
    }
    viewOf_[node->output()] = *path;
    stateViews_[*path].push_back(node->output());
    return false;
  }

  // An in-place write of a state (index_copy_, copy_, add_, sub_, mul_, div_): the functional op computing the state's
  // new version, which every later read sees.
  void writeState(const jit::Node* node, jit::Stack& stack) {
    const std::string op = node->kind().toQualString();
    const std::string path = *stateOf(node->input(0));
    const SourceLoc loc = sourceLoc(node);
    if (!stateAlias_.count(node->input(0)))
      userError("{} at {} writes through a view of the model's state '{}' (a slice or reshape of it); kiln writes whole "
                "states: write the buffer itself (index_copy_ along a dim)", op, loc.str(), path);
    if (op == "aten::embedding_renorm_") refuseOtherInPlace(node);  // its own advice: trace without max_norm
    const std::vector<std::string>& writes = supportedStateWrites();
    if (std::find(writes.begin(), writes.end(), op) == writes.end())
      userError("{} at {} changes the model's state '{}' in place, which kiln supports for {} only", op, loc.str(), path,
                fmt::join(writes, ", "));
    const std::string functional = op.substr(0, op.size() - 1);  // aten::index_copy, aten::copy, aten::add, ...
    for (const jit::Value* view : stateViews_[path])
      for (const jit::Use& use : view->uses())
        if (use.user->isAfter(node))
          userError("{} at {} changes the model's state '{}' while a view of it taken before, %{}, is still to be read at "
                    "{}; kiln's values never change: take the view after the write", op, loc.str(), path,
                    view->debugName(), sourceLoc(use.user).str());
    evaluateOnMeta(node, stack);
    StateVersions& st = states_.at(path);
    kiln::torch::Node n{functional, {st.current}, {}, loc};
    for (size_t i = 1; i < node->inputs().size(); ++i)
      for (int id : idsOf(node->input(i), node)) n.inputs.push_back(id);
    Value next = g_.values[static_cast<size_t>(st.current)];
    next.kind = Value::Kind::Tensor;
    next.name.clear();
    st.current = g_.addValue(next);
    n.outputs.push_back(st.current);
    g_.nodes.push_back(std::move(n));
    env_[node->output()] = stack.at(0);
    dynamic_.insert(node->output());
    stateAlias_[node->output()] = path;
  }

  // Appends a Torch-IR node `op` of `inputs` that the import made for TorchScript node `from` (an import-time rewrite:
  // index, writes through views, complex pairs), its one result a tensor of `sizes` and `type`: that result's id.
  int addNode(const std::string& op, std::vector<int> inputs, at::IntArrayRef sizes, c10::ScalarType type,
              const jit::Node* from) {
    const SourceLoc loc = sourceLoc(from);
    kiln::torch::Node n{op, std::move(inputs), {}, loc};
    n.outputs.push_back(tensorValue(at::empty(sizes, at::TensorOptions().dtype(type).device(at::kMeta)),
                                    from->kind().toQualString(), loc));
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back().outputs.back();
  }

  // A new Torch-IR value: an integer constant, or a tensor computed from input data with t's dtype and shape.
  int constantValue(int64_t v) {
    Value c;
    c.kind = Value::Kind::Constant;
    c.constant = v;
    return g_.addValue(c);
  }
  static std::string shapeText(const at::Tensor& t) {
    std::string dims;
    for (int64_t d : t.sizes()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    return dims;
  }

  int tensorValue(const at::Tensor& t, const std::string& op, const SourceLoc& loc) {
    Value val;
    val.kind = Value::Kind::Tensor;
    val.dtype = dtypeOf(t, op, loc);
    val.shape = t.sizes().vec();
    return g_.addValue(val);
  }

  // The dims of t from the largest stride to the smallest; permutedView: t is a permutation of a contiguous tensor
  // (no gaps, no overlaps) that is not itself contiguous, such as a transposed weight.
  static std::vector<int64_t> strideOrder(const at::Tensor& t) {
    std::vector<int64_t> order(static_cast<size_t>(t.dim()));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
    return order;
  }
  static bool permutedView(const at::Tensor& t) {
    if (t.dim() < 2 || t.is_contiguous() || t.numel() <= 1) return false;
    int64_t expected = 1;
    const std::vector<int64_t> order = strideOrder(t);
    for (size_t i = order.size(); i-- > 0;) {
      const int64_t d = order[i];
      if (t.size(d) != 1 && t.stride(d) != expected) return false;
      expected *= t.size(d);
    }
    return true;
  }
  // v is the right operand of a product that reduces over its first dim (aten::addmm's mat2, aten::mm's or aten::matmul's
  // second operand).
  static bool rightOperandOfProduct(const jit::Value* v, const jit::Node* user) {
    if (!user) return false;
    const std::string op = user->kind().toQualString();
    const size_t at = op == "aten::addmm" ? 2 : (op == "aten::mm" || op == "aten::matmul") ? 1 : SIZE_MAX;
    return at < user->inputs().size() && user->inputs()[at] == v;
  }
  int constantList(std::vector<int64_t> values) {
    Value c;
    c.kind = Value::Kind::Constant;
    c.constant = std::move(values);
    return g_.addValue(c);
  }
  // A weight value holding t's values (row-major in t's shape), named after the TorchScript value v.
  int weightValue(const at::Tensor& tensor, const jit::Value* v, const jit::Node* user) {
    Value val;
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    auto data = std::make_shared<kiln::torch::WeightData>();
    std::string name = v->hasDebugName() ? v->debugName() : "";
    if (name.rfind("self.", 0) == 0) name = name.substr(5);
    if (name.empty()) name = parameterViewed(tensor);
    data->name = name.empty() ? "constant" : name;
    at::Tensor f = t.to(at::kFloat).contiguous();
    data->values.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    val.kind = Value::Kind::Weight;
    val.dtype = dtypeOf(t, user ? user->kind().toQualString() : "graph output", user ? sourceLoc(user) : SourceLoc{});
    val.shape = t.sizes().vec();
    val.weight = data;
    return g_.addValue(val);
  }

  // The module's parameters and buffers by their memory, so that a constant freezing folded from one of them
  // (transformers' grouped_mm experts read `gate_up_proj.transpose(-2, -1)`) keeps the parameter's name.
  void nameStorage(const std::string& name, const at::Tensor& t) {
    if (t.defined() && t.has_storage() && t.numel() > 0) storageNames_.emplace(t.storage().data(), std::make_pair(name, t.numel()));
  }
  std::string parameterViewed(const at::Tensor& t) const {
    if (!t.defined() || !t.has_storage()) return "";
    auto it = storageNames_.find(t.storage().data());
    return it != storageNames_.end() && it->second.second == t.numel() && t.storage_offset() == 0 ? it->second.first : "";
  }

  // `logical` (a constant's value) as the weight `stored` (the same values in another layout) and an aten::permute by
  // `back` that gives `logical` again: the id of the permute's result.
  int permutedWeight(const at::Tensor& stored, std::vector<int64_t> back, const at::Tensor& logical, const jit::Value* v,
                     const jit::Node* user) {
    const int base = weightValue(stored, v, user);
    kiln::torch::Node n{"aten::permute", {base, constantList(std::move(back))}, {}, user ? sourceLoc(user) : SourceLoc{}};
    n.outputs.push_back(tensorValue(logical, "aten::permute", n.loc));
    g_.nodes.push_back(n);
    return n.outputs.back();
  }

  // The kiln value ids a TorchScript value stands for (several for a list or tuple of tensors).
  std::vector<int> idsOf(const jit::Value* v, const jit::Node* user) {
    if (auto it = stateAlias_.find(v); it != stateAlias_.end()) return {states_.at(it->second).current};
    if (auto it = ids_.find(v); it != ids_.end()) return it->second;
    const c10::IValue& iv = env_.at(v);
    Value val;
    if (iv.isTensor() && iv.toTensor().dim() == 0 && iv.toTensor().is_floating_point() && user) {
      // A Python scalar the tracer recorded as a 0-dim tensor (often f64): an f32 immediate to kiln. As a model output
      // (zeros_like of a 0-d input, say) it stays a tensor, which the output check then refuses as a constant.
      val.kind = Value::Kind::Constant;
      val.constant = iv.toTensor().item<double>();
    } else if (iv.isTensor() && permutedView(iv.toTensor())) {
      // A transposed weight (Falcon's x @ weight.T, which freezing folded into a constant that still views the
      // weight's memory): the weight in its own layout and an aten::permute, so the products read it as stored (k
      // contiguous, as nn.Linear keeps it) instead of from a transposed copy.
      const at::Tensor& view = iv.toTensor();
      const std::vector<int64_t> order = strideOrder(view);
      std::vector<int64_t> back(order.size());
      for (size_t i = 0; i < order.size(); ++i) back[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
      return ids_[v] = {permutedWeight(view.permute(order), back, view, v, user)};
    } else if (iv.isTensor() && iv.toTensor().dim() == 2 && iv.toTensor().is_floating_point() && iv.toTensor().size(1) > 1 &&
               iv.toTensor().is_contiguous() && rightOperandOfProduct(v, user)) {
      // A 2-D weight multiplied from the right, [K, N] with N contiguous (GPT-2's Conv1D: addmm(b, x, W)): kept as its
      // transpose [N, K] (the layout of nn.Linear's weights, k contiguous, which the products stream) and an
      // aten::permute back, as a transposed view is above. The values are the same; only weights.bin's layout changes.
      const at::Tensor& w = iv.toTensor();
      return ids_[v] = {permutedWeight(w.t(), {1, 0}, w, v, user)};
    } else if (iv.isTensor()) {
      return ids_[v] = {weightValue(iv.toTensor(), v, user)};
    } else if (iv.isTensorList()) {
      userError("a constant tensor list used by {} is not supported", user ? user->kind().toQualString() : "the output");
    } else {
      val.kind = Value::Kind::Constant;
      val.constant = toScalar(iv, user ? user : v->node());
    }
    std::vector<int> id{g_.addValue(val)};
    ids_[v] = id;
    return id;
  }

  // An int32 tensor inside the model (transformers' grouped_mm experts take their offsets as
  // cumsum(..., dtype=torch.int32)) is computed as i64, which holds every int32 value; as a model output it would come
  // back in another dtype than LibTorch's, so an int32 output is refused.
  void refuseInt32Outputs(const c10::IValue& v) {
    if (v.isTensor() && v.toTensor().scalar_type() == at::kInt)
      userError("a model output is an int32 tensor; kiln computes int32 values as i64: return it as int64 (.long())");
    if (v.isTuple())
      for (const c10::IValue& e : v.toTupleRef().elements()) refuseInt32Outputs(e);
    if (v.isList())
      for (const c10::IValue& e : v.toListRef()) refuseInt32Outputs(e);
    if (v.isGenericDict())
      for (const auto& e : v.toGenericDict()) refuseInt32Outputs(e.value());
  }

  DType dtypeOf(const at::Tensor& t, const std::string& op, const SourceLoc& loc) {
    switch (t.scalar_type()) {
      case at::kFloat: return DType::F32;
      case at::kHalf: return DType::F16;
      case at::kBFloat16: return DType::BF16;
      case at::kLong: return DType::I64;
      case at::kInt: return DType::I64;  // widened (refuseInt32Outputs)
      case at::kBool: return DType::Bool;
      default:
        userError("{} at {} produces a {} tensor; kiln supports f32, f16, bf16, i64 and bool", op, loc.str(),
                  c10::toString(t.scalar_type()));
    }
  }

  std::string path_;
  std::optional<DType> castTo_;
  Graph g_;
  std::unordered_map<const jit::Value*, c10::IValue> env_;
  std::unordered_map<const jit::Value*, std::vector<int>> ids_;
  std::unordered_set<const jit::Value*> dynamic_;
  // Model state (model_state.h): each state's latest version, the values that are a state itself, and the views of one.
  struct StateVersions {
    int current = -1;  // Torch-IR value id; -1 before the first read
    at::Tensor meta;   // its shape and dtype
  };
  std::map<std::string, StateVersions> states_;
  std::unordered_map<const jit::Value*, std::string> stateAlias_, viewOf_;
  std::unordered_map<const void*, std::pair<std::string, int64_t>> storageNames_;  // nameStorage
  std::unordered_map<const jit::Value*, int> complexPairs_;  // complexAsPairs: a complex value's [.., 2] real pair
  std::unordered_map<int, std::string> keyOf_;  // a value's key in the first dict that holds it (outputNames)
  std::map<std::string, std::vector<const jit::Value*>> stateViews_;
};

}  // namespace

Forward loadForward(const std::string& path, jit::ExtraFilesMap& extra, std::optional<DType> castTo,
                    const std::function<void(jit::Module&)>& beforeFreeze) {
  Forward f{loadModule(path, extra), {}, nullptr};
  try {
    f.module.eval();
    castModule(f.module, castTo);
    if (beforeFreeze) beforeFreeze(f.module);
    f.frozen = jit::freeze_module(f.module);
    f.graph = f.frozen.get_method("forward").graph()->copy();
    jit::Inline(*f.graph);
    jit::EliminateDeadCode(f.graph);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    userError("{}: cannot freeze the module's forward ({}); kiln needs a traced module with a forward method", path,
              firstLine(e.what()));
  }
  return f;
}

Graph importModel(const std::string& path, const std::vector<InputOverride>& overrides, std::optional<DType> castTo) {
  jit::ExtraFilesMap extra{{kInputsFile, ""}};
  Forward f = loadForward(path, extra, castTo);
  auto specs = resolveInputs(path, f.module, *f.graph, extra[kInputsFile], overrides);
  if (castTo)
    for (auto& s : specs)
      if (s.dtype == DType::F32 || s.dtype == DType::F16 || s.dtype == DType::BF16) s.dtype = *castTo;
  std::vector<at::Tensor> inputs;
  for (const InputSpec& spec : specs)
    inputs.push_back(at::empty(spec.shape, at::TensorOptions().dtype(scalarType(spec.dtype)).device(at::kMeta)));
  ::torch::NoGradGuard noGrad;
  // LibTorch's warnings while the import runs the ops (deprecations, e.g. scatter's reduce argument) speak of PyTorch's
  // internals, not of the user's model; kiln's own messages are the one line the user gets.
  struct Quiet : c10::WarningHandler {
    void process(const c10::Warning&) override {}
  } quiet;
  c10::WarningUtils::WarningHandlerGuard quietGuard(&quiet);
  return Importer(path, std::filesystem::path(path).stem().string(), castTo, f.module).run(f.frozen, *f.graph, specs, inputs);
}

}  // namespace kiln::frontend
