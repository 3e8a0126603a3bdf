#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

std::string operandString(const Operand& o) { return o.isImm() ? fmt::format("{}", o.imm) : fmt::format("%{}", o.node); }

std::string body(const Graph& g, const Node& n) {
  switch (n.kind) {
    case Node::Kind::Input: return fmt::format("input \"{}\"", n.name);
    case Node::Kind::Weight: return fmt::format("weight \"{}\"", n.name);
    case Node::Kind::Elementwise: {
      std::vector<std::string> ops;
      for (auto& o : n.operands) ops.push_back(operandString(o));
      return fmt::format("{}({})", fnName(n.fn), fmt::join(ops, ", "));
    }
    case Node::Kind::Reduce:
      return fmt::format("reduce {}(%{}) axes [{}]", reduceName(n.reduceFn), n.operands[0].node, fmt::join(n.axes, ", "));
    case Node::Kind::IndexMap: {
      std::vector<std::string> idx;
      for (auto& e : n.index) idx.push_back(toString(e));
      return fmt::format("index_map %{}[{}]", n.operands[0].node, fmt::join(idx, ", "));
    }
    case Node::Kind::Gather: return fmt::format("gather %{}[%{}]", n.operands[0].node, n.operands[1].node);
    case Node::Kind::Concat: {
      std::vector<std::string> ops;
      for (auto& o : n.operands) ops.push_back(operandString(o));
      return fmt::format("concat({}) axis {}", fmt::join(ops, ", "), n.axes.at(0));
    }
    case Node::Kind::AllReduce: return fmt::format("all_reduce sum(%{})", n.operands[0].node);
  }
  return "?";
}

const char* kindName(Node::Kind k) {
  switch (k) {
    case Node::Kind::Input: return "input";
    case Node::Kind::Weight: return "weight";
    case Node::Kind::Elementwise: return "elementwise";
    case Node::Kind::Reduce: return "reduce";
    case Node::Kind::IndexMap: return "index_map";
    case Node::Kind::Gather: return "gather";
    case Node::Kind::Concat: return "concat";
    case Node::Kind::AllReduce: return "all_reduce";
  }
  return "?";
}

}  // namespace

std::string print(const Graph& g) {
  std::string out = fmt::format("// kiln tensor IR: {}\n", g.modelName);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::string line = fmt::format("%{} = {} : {}[{}]", i, body(g, n), dtypeName(n.dtype), shapeString(n.shape));
    if (!n.origin.empty()) line += "  // " + n.origin;
    out += line + "\n";
  }
  std::vector<std::string> outs;
  for (int o : g.outputs) outs.push_back(fmt::format("%{}", o));
  out += fmt::format("return {}\n", fmt::join(outs, ", "));
  return out;
}

nlohmann::json toJson(const Graph& g) {
  nlohmann::json j{{"level", "tensor"}, {"model", g.modelName}, {"inputs", g.inputs}, {"outputs", g.outputs}};
  j["nodes"] = nlohmann::json::array();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    j["nodes"].push_back({{"id", i}, {"kind", kindName(n.kind)}, {"text", body(g, n)}, {"dtype", dtypeName(n.dtype)},
                          {"shape", n.shape}, {"origin", n.origin}});
  }
  return j;
}

}  // namespace kiln::tensor
