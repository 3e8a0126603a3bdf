#include "model_inputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"

namespace kiln::frontend {
namespace jit = ::torch::jit;

std::vector<std::string> forwardArgumentNames(const jit::Module& m) {
  std::vector<std::string> names;
  const auto& args = m.get_method("forward").function().getSchema().arguments();
  for (size_t i = 1; i < args.size(); ++i) names.push_back(args[i].name());
  return names;
}

std::vector<InputSpec> recordedInputs(const std::string& path, const std::string& json) {
  if (json.empty()) return {};
  try {
    auto j = nlohmann::json::parse(json);
    std::vector<InputSpec> specs;
    for (auto& in : j.at("inputs")) {
      InputSpec s;
      s.name = in.at("name").get<std::string>();
      // Dimensions are positive integers (nlohmann would read 1.5 as 1), at most kMaxInputElements in all.
      if (!in.at("shape").is_array()) userError("{}: {} gives input '{}' a shape that is not a list", path, kInputsFile, s.name);
      int64_t elements = 1;
      for (const auto& d : in.at("shape")) {
        if (!d.is_number_integer() || d.get<int64_t>() <= 0)
          userError("{}: {} gives input '{}' the dimension {}; dimensions are positive integers (re-export the model with "
                    "models/kiln_export.py, or give the shape with --input)", path, kInputsFile, s.name, d.dump());
        s.shape.push_back(d.get<int64_t>());
        if (__builtin_mul_overflow(elements, s.shape.back(), &elements) || elements > kMaxInputElements)
          userError("{}: {} gives input '{}' more than 2^31 elements (kiln's limit)", path, kInputsFile, s.name);
      }
      auto dt = parseDType(in.at("dtype").get<std::string>());
      if (!dt) userError("{}: {} names unknown dtype '{}'", path, kInputsFile, in.at("dtype").get<std::string>());
      s.dtype = *dt;
      specs.push_back(s);
    }
    return specs;
  } catch (const nlohmann::json::exception& e) {
    userError("{}: {} is malformed ({}); re-export the model with models/kiln_export.py, or delete the record and give "
              "the inputs with --input", path, kInputsFile, e.what());
  }
}

namespace {

// A 2-D weight folded into a constant by freezing.
std::optional<at::Tensor> constantMatrix(const jit::Value* v) {
  auto iv = jit::toIValue(v);
  if (!iv || !iv->isTensor() || iv->toTensor().dim() != 2) return std::nullopt;
  return iv->toTensor();
}

}  // namespace

std::string exampleInput(const jit::Graph& graph, size_t index, const std::string& name) {
  const jit::Value* v = graph.inputs().at(index + 1);
  for (const jit::Use& use : v->uses()) {
    std::string op = use.user->kind().toQualString();
    if (op == "aten::embedding" && use.offset == 1) return name + "=1x8:i64";
    if (use.offset != 0 || use.user->inputs().size() < 2) continue;
    auto w = constantMatrix(use.user->input(1));
    if (!w) continue;
    if (op == "aten::linear") return fmt::format("{}=1x8x{}:f32", name, w->size(1));
    if (op == "aten::matmul" || op == "aten::mm") return fmt::format("{}=8x{}:f32", name, w->size(0));
  }
  return name + "=1x8x64:f32";
}

std::vector<InputSpec> resolveInputs(const std::string& path, const jit::Module& module, const jit::Graph& graph,
                                     const std::string& recordedJson, const std::vector<InputOverride>& overrides) {
  size_t graphInputs = graph.inputs().size() - 1;
  std::vector<InputSpec> specs = recordedInputs(path, recordedJson);
  bool recorded = !specs.empty();
  std::vector<bool> known(specs.size(), true);
  if (recorded && specs.size() != graphInputs)
    userError("{} takes {} inputs but records {} in {}; export it again with models/kiln_export.py", path, graphInputs,
              specs.size(), kInputsFile);
  if (!recorded) {
    for (const std::string& n : forwardArgumentNames(module)) specs.push_back(InputSpec{n, {}, DType::F32});
    known.assign(specs.size(), false);
    KILN_ASSERT(specs.size() == graphInputs, "forward takes {} arguments, its graph {}", specs.size(), graphInputs);
  }
  for (const auto& o : overrides) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](auto& s) { return s.name == o.name; });
    if (it == specs.end()) {
      std::string names;
      for (auto& s : specs) names += (names.empty() ? "" : ", ") + s.name;
      usageError("--input names '{}', but {} has inputs: {}", o.name, path, names.empty() ? "(none)" : names);
    }
    it->shape = o.shape;
    // A recorded dtype is what the trace's ops were recorded for (an f32 linear cannot take i64 tokens): another one
    // is refused, as LibTorch would refuse it; --dtype is how a whole model changes its floating type.
    if (o.dtype && recorded && *o.dtype != it->dtype)
      usageError("--input gives '{}' the dtype {}, but {} records {} for it; drop ':{}' (or use --dtype to change the "
                 "model's floating type)", o.name, dtypeName(*o.dtype), path, dtypeName(it->dtype), dtypeName(*o.dtype));
    if (o.dtype) it->dtype = *o.dtype;
    known[it - specs.begin()] = true;
  }
  std::vector<std::string> missing, examples;
  for (size_t i = 0; i < specs.size(); ++i)
    if (!known[i]) {
      missing.push_back("'" + specs[i].name + "'");
      examples.push_back("--input " + exampleInput(graph, i, specs[i].name));
    }
  if (!missing.empty())
    userError("{} records no input shapes ({} is not in the archive: a plain torch.jit.trace); give the shape of {} {} "
              "with --input NAME=SHAPE[:DTYPE], e.g. {}",
              path, kInputsFile, missing.size() == 1 ? "input" : "inputs", fmt::join(missing, ", "),
              fmt::join(examples, " "));
  return specs;
}

}  // namespace kiln::frontend
