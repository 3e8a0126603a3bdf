// torch.export archives (.pt2) read as the TorchScript module the rest of the frontend takes (exported_program.h).
//
// The archive's serialized ExportedProgram (models/<name>.json: the graph, its tensor metadata and the signature) and
// its weights (data/weights, data/constants: raw bytes described by model_weights_config.json and
// model_constants_config.json) become a module whose buffers are the weights and whose `forward` is a TorchScript graph
// built node by node: each node's ATen overload is looked up in LibTorch's registry, its named arguments placed in the
// schema's order (defaults where the program leaves them out), constants inserted for the non-tensor ones. Freezing,
// the import, the reference run and --bisect then treat it as any trace.
#include <fmt/format.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "exported_program.h"
#include "kiln/support/checked_int.h"
#include "kiln/support/error.h"
#include "model_inputs.h"
#include "torch_util.h"

namespace kiln::frontend {
namespace jit = ::torch::jit;
using json = nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 64;

// The record `name` under the archive's folder, as text.
std::string record(caffe2::serialize::PyTorchStreamReader& archive, const std::string& path, const std::string& name) {
  if (!archive.hasRecord(name)) userError("{}: the torch.export archive has no record '{}'; save it with torch.export.save", path, name);
  auto [data, size] = archive.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

json parseRecord(caffe2::serialize::PyTorchStreamReader& archive, const std::string& path, const std::string& name) {
  const std::string text = record(archive, path, name);
  int depth = 0, deepest = 0;
  json parsed = json::parse(text, [&](int d, json::parse_event_t, json&) {
    depth = d;
    deepest = std::max(deepest, depth);
    return depth <= kMaxJsonDepth;  // deeper values are not kept (the refusal below names the record)
  }, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) userError("{}: record '{}' of the torch.export archive is not valid JSON", path, name);
  if (deepest > kMaxJsonDepth) userError("{}: record '{}' nests deeper than {} levels", path, name, kMaxJsonDepth);
  return parsed;
}

// The program's ScalarType numbering (torch/_export/serde/schema.py) in c10's.
at::ScalarType scalarTypeOf(int64_t code, const std::string& where) {
  switch (code) {
    case 1: return at::kByte;
    case 2: return at::kChar;
    case 3: return at::kShort;
    case 4: return at::kInt;
    case 5: return at::kLong;
    case 6: return at::kHalf;
    case 7: return at::kFloat;
    case 8: return at::kDouble;
    case 9: return at::kComplexHalf;  // complex values the import computes as pairs of reals (DeepSeek-V2's rotary)
    case 10: return at::kComplexFloat;
    case 11: return at::kComplexDouble;
    case 12: return at::kBool;
    case 13: return at::kBFloat16;
    default: userError("{}: dtype code {} of the torch.export program is not one kiln reads", where, code);
  }
}

// An int of the program's tensor metadata: {"as_int": N}; a symbolic size ({"as_expr": ...}) is a dynamic dimension.
int64_t metaInt(const json& v, const std::string& where) {
  if (v.is_object() && v.contains("as_int") && v["as_int"].is_number_integer()) return v["as_int"].get<int64_t>();
  userError("{} has a dynamic dimension; kiln compiles fixed shapes: export with static shapes (no dynamic_shapes)", where);
}

std::vector<int64_t> metaInts(const json& list, const std::string& where) {
  std::vector<int64_t> out;
  if (!list.is_array()) userError("{}: the torch.export program's tensor metadata is damaged", where);
  for (const json& v : list) out.push_back(metaInt(v, where));
  return out;
}

// A weight or constant: its raw bytes (data/weights/PATH) viewed with the recorded dtype, sizes, strides and offset.
at::Tensor storedTensor(caffe2::serialize::PyTorchStreamReader& archive, const std::string& path, const std::string& folder,
                        const std::string& name, const json& entry) {
  const std::string where = fmt::format("{}: tensor '{}'", path, name);
  if (!entry.is_object() || !entry.contains("path_name") || !entry.contains("tensor_meta"))
    userError("{}: its entry in the archive's config is damaged", where);
  if (entry.value("use_pickle", false))
    userError("{} is stored pickled, which kiln does not read; save the program with torch.export.save of torch 2.5 or "
              "later", where);
  const json& meta = entry["tensor_meta"];
  const at::ScalarType type = scalarTypeOf(meta.value("dtype", 0), where);
  const std::vector<int64_t> sizes = metaInts(meta.at("sizes"), where), strides = metaInts(meta.at("strides"), where);
  const int64_t offset = metaInt(meta.at("storage_offset"), where);
  if (sizes.size() != strides.size()) userError("{}: {} sizes but {} strides", where, sizes.size(), strides.size());
  const std::string bytes = record(archive, path, folder + entry["path_name"].get<std::string>());
  const int64_t element = static_cast<int64_t>(c10::elementSize(type));
  std::optional<int64_t> last = offset;  // the last element the view reads, which must lie inside the stored bytes
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0 || offset < 0) userError("{}: negative size, stride or offset", where);
    empty = empty || sizes[d] == 0;
    const std::optional<int64_t> step = checkedMul(std::max<int64_t>(sizes[d] - 1, 0), strides[d]);
    last = last && step ? checkedAdd(*last, *step) : std::nullopt;
  }
  const std::optional<int64_t> end = last ? checkedAdd(*last, 1) : std::nullopt;
  const std::optional<int64_t> needed = end ? checkedMul(*end, element) : std::nullopt;
  if (!empty && (!needed || *needed > static_cast<int64_t>(bytes.size())))
    userError("{}: its view reaches past the {} bytes stored for it", where, bytes.size());
  at::Tensor storage = at::empty({static_cast<int64_t>(bytes.size()) / element}, at::TensorOptions().dtype(type));
  std::memcpy(storage.data_ptr(), bytes.data(), static_cast<size_t>(storage.numel() * element));
  return empty ? at::empty(sizes, at::TensorOptions().dtype(type)) : storage.as_strided(sizes, strides, offset).clone();
}

// Where the user's code made a node: the innermost frame of its recorded stack trace outside torch itself ("File
// \"models/x.py\", line 12, in forward"), as a source range the import's sourceLoc reads; none when there is none.
std::optional<jit::SourceRange> userFrame(const json& node) {
  const json meta = node.value("metadata", json::object());
  const std::string trace = meta.is_object() && meta.contains("stack_trace") && meta["stack_trace"].is_string()
                                ? meta["stack_trace"].get<std::string>() : "";
  static const std::regex frame("File \"([^\"]+)\", line ([0-9]{1,9})");
  std::optional<std::pair<std::string, size_t>> found;
  for (std::sregex_iterator it(trace.begin(), trace.end(), frame), end; it != end; ++it) {
    const std::string file = (*it)[1];
    if (file.find("/torch/") == std::string::npos) found = {{file, std::stoul((*it)[2])}};
  }
  if (!found) return std::nullopt;
  return jit::SourceRange(std::make_shared<jit::Source>(std::string(" "), found->first, found->second), 0, 1);
}

struct Builder {
  std::string path;
  jit::Graph& graph;
  std::map<std::string, jit::Value*> values;  // the program's value names

  // A float argument: a JSON number, or the strings the program writes for the values JSON has none of.
  double number(const json& v, const std::string& where) const {
    if (v.is_number()) return v.get<double>();
    const std::string s = v.is_string() ? v.get<std::string>() : "";
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    userError("{}: {}: a float argument that is neither a number nor Infinity, -Infinity or NaN", path, where);
  }

  jit::Value* tensor(const json& arg, const std::string& where) {
    const std::string name = arg.is_object() ? arg.value("name", "") : "";
    auto it = values.find(name);
    if (it == values.end()) userError("{}: {} names a value '{}' no earlier node computes", path, where, name);
    return it->second;
  }

  // An argument of the node (one of the program's Argument kinds) as a graph value of the schema's type.
  jit::Value* argument(const json& arg, const c10::Argument& formal, const std::string& where) {
    if (!arg.is_object() || arg.size() != 1) userError("{}: {}: damaged argument", path, where);
    const std::string kind = arg.begin().key();
    const json& v = arg.begin().value();
    if (kind == "as_tensor") return tensor(v, where);
    if (kind == "as_tensors" || kind == "as_optional_tensors") {
      std::vector<jit::Value*> items;
      for (const json& t : v) {
        if (t.contains("as_none")) items.push_back(graph.insertConstant(c10::IValue()));
        else items.push_back(tensor(t.contains("as_tensor") ? t["as_tensor"] : t, where));
      }
      c10::TypePtr element = formal.type()->containedTypes().empty() ? c10::TensorType::get() : formal.type()->containedTypes()[0];
      return graph.insertNode(graph.createList(element, items))->output();
    }
    if (kind == "as_none") return graph.insertConstant(c10::IValue());
    if (kind == "as_int") return graph.insertConstant(v.get<int64_t>());
    if (kind == "as_float") return graph.insertConstant(number(v, where));
    if (kind == "as_bool") return graph.insertConstant(v.get<bool>());
    if (kind == "as_string") return graph.insertConstant(v.get<std::string>());
    if (kind == "as_ints") return graph.insertConstant(v.get<std::vector<int64_t>>());
    if (kind == "as_floats") {
      std::vector<double> floats;
      for (const json& x : v) floats.push_back(number(x, where));
      return graph.insertConstant(floats);
    }
    if (kind == "as_bools") {
      c10::List<bool> bools;
      for (const json& x : v) bools.push_back(x.get<bool>());
      return graph.insertConstant(bools);
    }
    if (kind == "as_scalar_type") return graph.insertConstant(static_cast<int64_t>(scalarTypeOf(v.get<int64_t>(), path + ": " + where)));
    if (kind == "as_layout") {
      if (v.get<int64_t>() != 7) userError("{}: {}: a sparse or mkldnn layout; kiln computes strided tensors", path, where);
      return graph.insertConstant(c10::IValue(at::kStrided));
    }
    if (kind == "as_memory_format") return graph.insertConstant(c10::IValue(c10::MemoryFormat::Contiguous));
    if (kind == "as_device") {
      const std::string type = v.value("type", "cpu");
      const int index = v.contains("index") && v["index"].is_number_integer() ? v["index"].get<int>() : -1;
      const c10::DeviceType device = type == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
      return graph.insertConstant(c10::Device(device, static_cast<c10::DeviceIndex>(index)));
    }
    if (kind.rfind("as_sym", 0) == 0)
      userError("{}: {} takes a symbolic size; kiln compiles fixed shapes: export with static shapes", path, where);
    userError("{}: {}: an argument of kind '{}', which kiln does not read", path, where, kind);
  }

  void node(const json& n) {
    const std::string target = n.value("target", "");
    const std::string where = fmt::format("node '{}' ({})", n.value("name", "?"), target);
    const std::string prefix = "torch.ops.aten.";
    if (target.rfind(prefix, 0) != 0)
      userError("{}: {} is not an ATen op (a higher-order or custom op); kiln reads ATen graphs: export under "
                "torch.no_grad() without custom ops", path, where);
    const std::string rest = target.substr(prefix.size());
    const size_t dot = rest.rfind('.');
    const std::string op = "aten::" + rest.substr(0, dot);
    const std::string overload = dot == std::string::npos || rest.substr(dot + 1) == "default" ? "" : rest.substr(dot + 1);
    if (op == "aten::_assert_tensor_metadata") return;  // a check of the trace's own values: no result
    auto handle = c10::Dispatcher::singleton().findSchema({op, overload});
    if (!handle) userError("{}: {}: LibTorch has no op {}.{}", path, where, op, overload.empty() ? "default" : overload);
    const c10::FunctionSchema& schema = handle->schema();
    std::vector<jit::Value*> inputs;
    for (const c10::Argument& formal : schema.arguments()) {
      const json* given = nullptr;
      for (const json& in : n.at("inputs"))
        if (in.value("name", "") == formal.name()) given = &in.at("arg");
      if (given) inputs.push_back(argument(*given, formal, where));
      else if (formal.default_value()) inputs.push_back(graph.insertConstant(*formal.default_value()));
      else userError("{}: {}: no value for the argument '{}'", path, where, formal.name());
    }
    jit::Node* created = graph.insertNode(graph.create(c10::Symbol::fromQualString(op), inputs, schema.returns().size()));
    if (auto range = userFrame(n)) created->setSourceRange(*range);
    for (size_t i = 0; i < schema.returns().size(); ++i) created->output(i)->setType(schema.returns()[i].type());
    const json& outs = n.at("outputs");
    for (size_t i = 0; i < outs.size() && i < schema.returns().size(); ++i) {
      if (outs[i].contains("as_tensor")) {
        const std::string name = outs[i]["as_tensor"].value("name", "");
        created->output(i)->setDebugName(name);
        values[name] = created->output(i);
      } else if (outs[i].contains("as_tensors")) {
        const json& parts = outs[i]["as_tensors"];
        jit::Node* unpack = graph.insertNode(graph.createListUnpack(created->output(i), parts.size()));
        for (size_t j = 0; j < parts.size(); ++j) values[parts[j].value("name", "")] = unpack->output(j);
      }
    }
  }
};

}  // namespace

bool isExportArchive(caffe2::serialize::PyTorchStreamReader* archive) {
  return archive && archive->hasRecord("archive_format");
}

namespace {

// A user input of the signature: its name, and its name, static shape and dtype appended to `recorded` (the
// kiln_inputs.json a trace records).
std::string userInput(const std::string& path, const json& spec, const json& graph, json& recorded) {
  const json& arg = spec.at("arg");
  const std::string name = arg.contains("as_tensor") ? arg["as_tensor"].value("name", "") : "";
  if (name.empty()) userError("{}: an input that is not a tensor; kiln's models take tensors", path);
  const json& meta = graph.at("tensor_values").at(name);
  const std::vector<int64_t> shape = metaInts(meta.at("sizes"), fmt::format("{}: input '{}'", path, name));
  const at::ScalarType type = scalarTypeOf(meta.value("dtype", 0), path);
  const std::map<at::ScalarType, std::string> names{{at::kFloat, "f32"}, {at::kHalf, "f16"}, {at::kBFloat16, "bf16"},
                                                    {at::kLong, "i64"}, {at::kBool, "bool"}};
  if (!names.count(type)) userError("{}: input '{}' is {}; kiln takes f32, f16, bf16, i64 and bool", path, name, c10::toString(type));
  recorded.push_back({{"name", name}, {"shape", shape}, {"dtype", names.at(type)}});
  return name;
}

// A parameter, buffer or constant of the signature: its name and values. Parameters and persistent buffers are among
// the weights, constants and non-persistent buffers among the constants.
std::pair<std::string, at::Tensor> storedInput(caffe2::serialize::PyTorchStreamReader& archive, const std::string& path,
                                               const std::string& kind, const json& spec, const json& weights,
                                               const json& constants) {
  const char* field = kind == "parameter" ? "parameter_name" : kind == "buffer" ? "buffer_name"
                    : kind == "tensor_constant" || kind == "constant_tensor" ? "tensor_constant_name" : nullptr;
  if (!field) userError("{}: an input of kind '{}' (custom objects, tokens), which kiln does not read", path, kind);
  const std::string fqn = spec.value(field, "");
  const bool inWeights = weights.contains(fqn);
  if (!inWeights && !constants.contains(fqn)) userError("{}: the archive stores no tensor for '{}'", path, fqn);
  return {fqn, storedTensor(archive, path, inWeights ? "data/weights/" : "data/constants/", fqn,
                            inWeights ? weights.at(fqn) : constants.at(fqn))};
}

jit::Module buildModule(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive, jit::ExtraFilesMap& extra) {
  std::string modelRecord;
  for (const std::string& name : archive.getAllRecords())
    if (name.rfind("models/", 0) == 0 && name.size() > 12 && name.compare(name.size() - 5, 5, ".json") == 0) modelRecord = name;
  if (modelRecord.empty()) userError("{}: the torch.export archive holds no program (models/*.json)", path);
  const json program = parseRecord(archive, path, modelRecord);
  const json& gm = program.value("graph_module", json::object());
  const json& g = gm.value("graph", json::object());
  const json& signature = gm.value("signature", json::object());
  const std::string name = modelRecord.substr(7, modelRecord.size() - 12);
  json weights = json::object(), constants = json::object();
  if (archive.hasRecord("data/weights/model_weights_config.json"))
    weights = parseRecord(archive, path, "data/weights/model_weights_config.json").value("config", json::object());
  if (archive.hasRecord("data/constants/model_constants_config.json"))
    constants = parseRecord(archive, path, "data/constants/model_constants_config.json").value("config", json::object());

  auto cu = std::make_shared<jit::CompilationUnit>();
  auto cls = c10::ClassType::create(c10::QualifiedName("__torch__.kiln_exported." + name), cu, /*is_module=*/true);
  cu->register_type(cls);
  jit::Module module(cu, cls);
  module.register_attribute("training", c10::BoolType::get(), false);
  auto graph = std::make_shared<jit::Graph>();
  jit::Value* self = graph->addInput("self");
  self->setType(cls);
  Builder b{path, *graph, {}};
  json recorded = json::array();
  for (const json& spec : signature.value("input_specs", json::array())) {
    if (!spec.is_object() || spec.size() != 1) userError("{}: an input of the program's signature is damaged", path);
    if (spec.begin().key() == "user_input") {
      const std::string arg = userInput(path, spec.begin().value(), g, recorded);
      jit::Value* in = graph->addInput(arg);
      in->setType(c10::TensorType::get());
      b.values[arg] = in;
      continue;
    }
    auto [fqn, t] = storedInput(archive, path, spec.begin().key(), spec.begin().value(), weights, constants);
    // One attribute of the module, named as the program names it (dots and all: no submodules), frozen into a constant
    // named "self.NAME", which the import names the weight after, as a trace's.
    if (cls->hasAttribute(fqn)) userError("{}: the program lists the tensor '{}' twice", path, fqn);
    module.register_buffer(fqn, t);
    b.values[spec.begin().value().at("arg").value("name", "")] = graph->insertGetAttr(self, fqn);
  }
  for (const json& n : g.value("nodes", json::array())) b.node(n);
  std::vector<jit::Value*> outputs;
  for (const json& spec : signature.value("output_specs", json::array())) {
    const std::string kind = spec.is_object() && spec.size() == 1 ? spec.begin().key() : "";
    if (kind != "user_output")
      userError("{}: an output of kind '{}' (a buffer or an input changed in place); kiln compiles forwards without state "
                "from torch.export programs", path, kind);
    outputs.push_back(b.tensor(spec.begin().value().at("arg").value("as_tensor", json::object()), "an output"));
  }
  if (outputs.empty()) userError("{}: the program returns no tensor", path);
  graph->registerOutput(outputs.size() == 1 ? outputs[0] : graph->insertNode(graph->createTuple(outputs))->output());
  cls->addMethod(cu->create_function(c10::QualifiedName(*cls->name(), "forward"), graph));
  extra[kInputsFile] = json{{"inputs", recorded}}.dump();
  return module;
}

}  // namespace

jit::Module loadExportedProgram(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive,
                                jit::ExtraFilesMap& extra) {
  try {
    return buildModule(path, archive, extra);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {  // a field of the wrong type, a record LibTorch cannot read, a graph it refuses
    userError("{}: the torch.export archive is damaged or uses what kiln does not read ({})", path, printable(firstLine(e.what())));
  }
}

}  // namespace kiln::frontend
