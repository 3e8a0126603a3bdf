// LibTorch's values inside a forward, for `kiln run --check --bisect` (frontend.h: referenceIntermediates).
//
// The forward is loaded, cast and frozen exactly as the import loads it (loadForward), so the TorchScript values keep
// the names the import recorded in torch::Value::traced; the named ones become extra outputs of that graph, and
// LibTorch's graph executor runs it on the same inputs as kiln's run.
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/cuda.h>

#include <fmt/format.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "import_eval.h"
#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"
#include "torch_util.h"

namespace kiln::frontend {

namespace jit = ::torch::jit;

std::string tracedValueKey(const jit::Node* node, int64_t ordinal, const jit::Value* output) {
  return fmt::format("{}#{}.{}", node->kind().toQualString(), ordinal, output->offset());
}

namespace {

// kiln's sort orders equal keys by their index (stable); LibTorch's aten::sort and argsort need not. Between a sort and
// the scatter that undoes it (a mixture-of-experts layer's rows grouped by expert) the values depend on that order, so
// the bisect's LibTorch run sorts stably too: each sort(x, dim, descending) becomes sort.stable(x, True, dim,
// descending), in place (the nodes' count and order stay those tracedValueKey counts).
void sortStably(jit::Graph& graph) {
  for (auto it = graph.nodes().begin(); it != graph.nodes().end(); ++it) {
    jit::Node* node = *it;
    const bool sort = node->kind() == c10::aten::sort, argsort = node->kind() == c10::aten::argsort;
    if ((!sort && !argsort) || node->inputs().size() != 3) continue;  // 4 inputs: already the stable form
    jit::WithInsertPoint before(node);
    jit::Value* stable = graph.insertConstant(true);
    jit::Node* stably = graph.create(node->kind(), {node->input(0), stable, node->input(1), node->input(2)}, node->outputs().size());
    stably->copyMetadata(node);
    graph.insertNode(stably);
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      stably->output(i)->setType(node->output(i)->type());
      stably->output(i)->copyMetadata(node->output(i));
      node->output(i)->replaceAllUsesWith(stably->output(i));
    }
    it.destroyCurrent();
  }
}

}  // namespace

std::map<std::string, TracedValue> referenceIntermediates(const std::string& path, const std::vector<HostTensor>& inputs,
                                                          const std::vector<std::string>& names, bool onGpu,
                                                          std::optional<DType> castTo, bool inF32) {
  if (onGpu && !::torch::cuda::is_available()) userError("LibTorch sees no CUDA device for the GPU reference run");
  jit::ExtraFilesMap extra;
  Forward f = loadForward(path, extra, castTo, [&](jit::Module& m) {
    if (inF32) {
      castModule(m, DType::F32);
      widenPinnedCasts(m);
    }
    if (onGpu) m.to(at::kCUDA);
  });
  jit::Graph& graph = *f.graph;
  const size_t arguments = graph.inputs().size() - 1;  // after `self`
  if (inputs.size() != arguments)
    userError("{}: --bisect compares the values inside a forward without state; this model takes {} inputs for {} "
              "arguments (its state): check it without --bisect", path, inputs.size(), arguments);
  const std::set<std::string> wanted(names.begin(), names.end());
  std::vector<jit::Value*> extraOutputs;
  std::map<std::string, TracedValue> result;
  sortStably(graph);
  std::vector<std::string> keys;  // extraOutputs' keys
  int64_t ordinal = 0;
  for (jit::Node* node : graph.nodes()) {
    if (node->kind() == c10::prim::Constant) continue;
    ++ordinal;
    for (jit::Value* out : node->outputs()) {
      const std::string key = tracedValueKey(node, ordinal, out);
      if (!wanted.count(key)) continue;
      TracedValue& t = result[key];
      t.op = std::string(node->kind().toQualString()) + " @ " + sourceLoc(node).str();
      t.name = "%" + out->debugName();
      extraOutputs.push_back(out);
      keys.push_back(key);
    }
  }
  // A function returns one value: the forward's own outputs and the wanted values, as one tuple.
  std::vector<jit::Value*> returned(graph.outputs().begin(), graph.outputs().end());
  const size_t own = returned.size();
  returned.insert(returned.end(), extraOutputs.begin(), extraOutputs.end());
  {
    jit::WithInsertPoint atReturn(graph.return_node());
    jit::Value* tuple = graph.insertNode(graph.createTuple(returned))->output();
    while (!graph.outputs().empty()) graph.eraseOutput(0);
    graph.registerOutput(tuple);
  }
  ::torch::NoGradGuard noGrad;
  jit::Stack stack{f.frozen._ivalue()};
  for (const HostTensor& t : inputs) {
    HostTensor widened = t;  // the values are already those of t's type
    if (inF32 && (t.dtype == DType::BF16 || t.dtype == DType::F16)) widened.dtype = DType::F32;
    stack.emplace_back(toTorch(widened, onGpu));
  }
  try {
    jit::GraphFunction forward("forward_with_intermediates", f.graph, nullptr);
    forward.run(stack);
  } catch (const std::exception& e) {
    userError("LibTorch's run of {} with its intermediate values as outputs failed on the {} ({})", path,
              onGpu ? "GPU" : "CPU", firstLine(e.what()));
  }
  KILN_ASSERT(stack.size() == 1 && stack[0].isTuple() && stack[0].toTupleRef().elements().size() == returned.size(),
              "{}: LibTorch returned {} values for a tuple of {}", path, stack.size(), returned.size());
  const auto& elements = stack[0].toTupleRef().elements();
  for (size_t i = 0; i < extraOutputs.size(); ++i) {
    const c10::IValue& v = elements[own + i];
    const at::ScalarType type = v.isTensor() ? v.toTensor().scalar_type() : at::kFloat;
    if (!v.isTensor() || !(at::isFloatingType(type) || type == at::kLong || type == at::kInt || type == at::kBool) ||
        type == at::kDouble) {
      result.erase(keys[i]);
      continue;
    }
    // kiln computes int32 values as i64 (the import's refuseInt32Outputs)
    result[keys[i]].value = fromTorch(type == at::kInt ? v.toTensor().to(at::kLong) : v.toTensor());
  }
  return result;
}

}  // namespace kiln::frontend
