// `kiln inspect`: a model's inputs, parameters and ops, read without input shapes (see frontend.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/script.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <unordered_set>

#include "kiln/frontend/frontend.h"
#include "model_inputs.h"
#include "model_state.h"
#include "torch_util.h"

namespace kiln::frontend {
namespace jit = ::torch::jit;
namespace {

std::string dtypeLabel(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "f32";
    case at::kHalf: return "f16";
    case at::kBFloat16: return "bf16";
    case at::kLong: return "i64";
    case at::kBool: return "bool";
    default: {
      std::string s = c10::toString(t);
      std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
      return s;
    }
  }
}

void add(ModelSummary::Tensors& into, const at::Tensor& t) {
  into.count += 1;
  into.elements += t.numel();
  into.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  into.dtypes[dtypeLabel(t.scalar_type())] += 1;
}

bool structural(const jit::Node* n) {
  auto k = n->kind();
  return k == c10::prim::ListConstruct || k == c10::prim::TupleConstruct || k == c10::prim::TupleUnpack ||
         k == c10::prim::ListUnpack || k == c10::prim::DictConstruct;
}

// Which nodes work on input data follows from the graph alone, as the import decides it: a node whose
// operands depend on an input does, unless it only reads their shapes (or shapes and dtypes: new_ones, zeros_like).
void classify(const jit::Block* block, std::unordered_set<const jit::Value*>& dynamic, ModelSummary& s) {
  for (const jit::Node* n : block->nodes()) {
    if (n->kind() == c10::prim::Constant) continue;
    if (n->kind() == c10::prim::GetAttr) {  // the model's state is a run-time value, as an input is
      auto path = attributePath(n->output());
      if (path && std::find(s.states.begin(), s.states.end(), *path) != s.states.end()) dynamic.insert(n->output());
    }
    bool dyn = std::any_of(n->inputs().begin(), n->inputs().end(), [&](const jit::Value* v) { return dynamic.count(v); });
    if (dyn && writesFirstOperand(n) && attributeBehind(n->input(0))) {
      s.stateWrites[n->kind().toQualString()] += 1;
      for (const jit::Value* v : n->outputs()) dynamic.insert(v);
      continue;
    }
    const bool folded = shapeOnly(n) || metadataOnly(n);
    if (!structural(n)) (dyn && !folded ? s.ops : s.folded)[n->kind().toQualString()] += 1;
    for (const jit::Block* b : n->blocks()) {
      for (const jit::Value* v : b->inputs())
        if (dyn) dynamic.insert(v);
      classify(b, dynamic, s);
    }
    if (dyn && !folded)
      for (const jit::Value* v : n->outputs()) dynamic.insert(v);
  }
}

}  // namespace

std::vector<std::string> inputNames(const std::string& path) {
  jit::ExtraFilesMap extra{{kInputsFile, ""}};
  jit::Module m = loadModule(path, extra);
  return forwardArgumentNames(m);
}

ModelSummary inspectModel(const std::string& path) {
  jit::ExtraFilesMap extra{{kInputsFile, ""}};
  Forward f = loadForward(path, extra, std::nullopt);
  ModelSummary s;
  s.name = std::filesystem::path(path).stem().string();
  s.inputs = recordedInputs(path, extra[kInputsFile]);
  s.inputsRecorded = !s.inputs.empty();
  if (!s.inputsRecorded)
    for (const std::string& n : forwardArgumentNames(f.module)) s.inputs.push_back(InputSpec{n, {}, DType::F32});
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const InputSpec& in = s.inputs[i];
    if (!s.inputsRecorded) {
      s.examples.push_back(exampleInput(*f.graph, i, in.name));
      continue;
    }
    s.examples.push_back(fmt::format("{}={}:{}", in.name, fmt::join(in.shape, "x"), dtypeName(in.dtype)));
  }
  for (const auto& p : f.module.named_parameters(/*recurse=*/true)) add(s.parameters, p.value);
  for (const auto& b : f.module.named_buffers(/*recurse=*/true)) add(s.buffers, b.value);
  std::unordered_set<const jit::Value*> dynamic;
  for (size_t i = 1; i < f.graph->inputs().size(); ++i) dynamic.insert(f.graph->inputs()[i]);
  s.states = stateNames(*f.graph);
  classify(f.graph->block(), dynamic, s);
  return s;
}

}  // namespace kiln::frontend
