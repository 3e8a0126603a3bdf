#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "kiln/torch/ir.h"

namespace kiln::torch {

std::string SourceLoc::str() const {
  if (file.empty()) return "<unknown location>";
  return fmt::format("{}:{}", file, line);
}

std::string scalarString(const Scalar& s) {
  struct V {
    std::string operator()(None) const { return "None"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(const std::vector<int64_t>& v) const { return fmt::format("[{}]", fmt::join(v, ", ")); }
    std::string operator()(const std::vector<double>& v) const { return fmt::format("[{}]", fmt::join(v, ", ")); }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
  };
  return std::visit(V{}, s);
}

namespace {

// Names values in order of first appearance so dumps do not depend on how ids were assigned.
struct Namer {
  const Graph& g;
  std::map<int, std::string> names;
  int next = 0;
  std::string operator()(int id) {
    const Value& v = g.values[id];
    if (v.kind == Value::Kind::Constant) return scalarString(v.constant);
    auto it = names.find(id);
    if (it != names.end()) return it->second;
    std::string n = v.kind == Value::Kind::Input ? "%" + v.name : fmt::format("%{}", next++);
    names[id] = n;
    return n;
  }
};

std::string typeString(const Value& v) { return fmt::format("{}[{}]", dtypeName(v.dtype), shapeString(v.shape)); }

}  // namespace

std::string print(const Graph& g) {
  Namer name{g};
  std::string out = fmt::format("// kiln torch IR: {}\n", g.modelName);
  std::vector<std::string> ins;
  for (int id : g.inputs) ins.push_back(fmt::format("{}: {}", name(id), typeString(g.values[id])));
  out += fmt::format("graph({}) {{\n", fmt::join(ins, ", "));
  std::vector<bool> weightPrinted(g.values.size(), false);
  auto printWeights = [&](const Node& n) {
    for (int id : n.inputs) {
      const Value& v = g.values[id];
      if (v.kind != Value::Kind::Weight || weightPrinted[id]) continue;
      weightPrinted[id] = true;
      std::string n0 = name(id);
      out += fmt::format("  {} = weight \"{}\" : {}\n", n0, v.weight->name, typeString(v));
    }
  };
  for (const Node& n : g.nodes) {
    printWeights(n);
    std::vector<std::string> args, results;
    for (int id : n.inputs) args.push_back(name(id));
    for (int id : n.outputs) results.push_back(name(id));
    std::vector<std::string> types;
    for (int id : n.outputs) types.push_back(typeString(g.values[id]));
    out += fmt::format("  {} = {}({}) : {}  // {}\n", fmt::join(results, ", "), n.op, fmt::join(args, ", "),
                       fmt::join(types, ", "), n.loc.str());
  }
  std::vector<std::string> outs;
  for (int id : g.outputs) outs.push_back(name(id));
  out += fmt::format("  return {}\n}}\n", fmt::join(outs, ", "));
  for (const State& st : g.states)
    out += fmt::format("// state \"{}\": read as {}, new value {}\n", st.name, name(st.input), name(st.output));
  return out;
}

nlohmann::json toJson(const Graph& g) {
  Namer name{g};
  nlohmann::json j;
  j["level"] = "torch";
  j["model"] = g.modelName;
  for (int id : g.inputs)
    j["inputs"].push_back({{"name", name(id)}, {"dtype", dtypeName(g.values[id].dtype)}, {"shape", g.values[id].shape}});
  j["nodes"] = nlohmann::json::array();
  for (const Node& n : g.nodes) {
    nlohmann::json node{{"op", n.op}, {"loc", n.loc.str()}};
    for (int id : n.inputs) node["inputs"].push_back(name(id));
    for (int id : n.outputs)
      node["outputs"].push_back({{"name", name(id)}, {"dtype", dtypeName(g.values[id].dtype)}, {"shape", g.values[id].shape}});
    j["nodes"].push_back(node);
  }
  for (int id : g.outputs) j["outputs"].push_back(name(id));
  for (const State& st : g.states)
    j["states"].push_back({{"name", st.name}, {"input", name(st.input)}, {"output", name(st.output)}});
  return j;
}

}  // namespace kiln::torch
