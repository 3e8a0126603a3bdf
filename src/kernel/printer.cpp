// Kernel IR text and JSON forms. The printer never throws on malformed IR (it is also used to dump the IR
// a failing pass or verifier saw): unknown parameter, shared buffer or float slot ids print as `?N`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "kiln/kernel/ir.h"
#include "kiln/support/overloaded.h"

namespace kiln::kernel {
namespace {

std::string floatName(const Kernel& k, int slot) {
  if (slot >= 0 && slot < static_cast<int>(k.floatVars.size())) return "%" + k.floatVars[slot];
  return fmt::format("%?{}", slot);
}

std::string pairName(const Kernel& k, int reg) {
  if (reg >= 0 && reg < static_cast<int>(k.pairVars.size())) return "$" + k.pairVars[reg];
  return fmt::format("$?{}", reg);
}

std::string paramName(const Kernel& k, int param) {
  if (param >= 0 && param < static_cast<int>(k.params.size())) return k.params[param].name;
  return fmt::format("?{}", param);
}

std::string sharedName(const Kernel& k, int buffer) {
  if (buffer >= 0 && buffer < static_cast<int>(k.shared.size())) return k.shared[buffer].name;
  return fmt::format("?{}", buffer);
}

std::string idxString(const Idx& e) { return e ? toString(e) : std::string("<null>"); }

std::string exprString(const Kernel& k, const FE& e) {
  if (!e) return "<null>";
  switch (e->kind) {
    case FExpr::Kind::Const: return fmt::format("{}", e->value);
    case FExpr::Kind::Var: return floatName(k, e->var);
    case FExpr::Kind::LoadGlobal: return fmt::format("load {}[{}]", paramName(k, e->param), idxString(e->index));
    case FExpr::Kind::LoadShared: return fmt::format("load shared {}[{}]", sharedName(k, e->shared), idxString(e->index));
    case FExpr::Kind::Select:
      return fmt::format("select({} < {}, {}, {})", idxString(e->index), idxString(e->bound), exprString(k, e->args[0]),
                         exprString(k, e->args[1]));
    case FExpr::Kind::Apply: {
      std::vector<std::string> args;
      for (auto& a : e->args) args.push_back(exprString(k, a));
      if (e->fn == Fn::Cast) return fmt::format("cast<{}>({})", dtypeName(e->castTo), fmt::join(args, ", "));
      return fmt::format("{}({})", tensor::fnName(e->fn), fmt::join(args, ", "));
    }
  }
  return "?";
}

// One line per statement, written by the function for its family; each returns false for a kind it does not print.
struct BlockPrinter {
  const Kernel& k;
  std::vector<std::string>& lines;
  std::string ind;

  void line(const std::string& text) { lines.push_back(ind + text); }
  std::string floats(const std::vector<int>& slots, size_t from, size_t n) const {
    std::vector<std::string> names;
    for (size_t i = from; i < from + n && i < slots.size(); ++i) names.push_back(floatName(k, slots[i]));
    return fmt::format("{}", fmt::join(names, ", "));
  }
  std::string at(const std::string& buffer, const Idx& index) const { return fmt::format("{}[{}]", buffer, idxString(index)); }
  std::string counter(const op::Counter& c) const { return at(paramName(k, c.param), c.index); }

  bool control(const Stmt& s, int depth);
  bool memory(const Stmt& s);
  bool synchronization(const Stmt& s);
  bool mbarriers(const Stmt& s);
  bool compute(const Stmt& s);
  void mma(const Stmt& s);
  void wgmma(const Stmt& s);
};

void printBlock(const Kernel& k, const Block& body, int depth, std::vector<std::string>& lines);

bool BlockPrinter::control(const Stmt& s, int depth) {
  switch (s.kind) {
    case Stmt::Kind::DefIdx: {
      const auto& def = s.as<op::DefIdx>();
      line(fmt::format("{} = {}{}", def.name, idxString(def.value), def.warpUniform ? "  (warp-uniform)" : ""));
      return true;
    }
    case Stmt::Kind::For: {
      const auto& loop = s.as<op::For>();
      line(fmt::format("for {} in {}..{} step {}{} {{", loop.name, idxString(loop.begin), idxString(loop.end), loop.step,
                       loop.unrollRing > 0 ? fmt::format(" unroll ring {}", loop.unrollRing) : ""));
      break;
    }
    case Stmt::Kind::If: line(fmt::format("if ({} < {}) {{", idxString(s.as<op::If>().lhs), idxString(s.as<op::If>().rhs))); break;
    default: return false;
  }
  printBlock(k, s.body, depth + 1, lines);
  line("}");
  return true;
}

bool BlockPrinter::memory(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::StoreGlobal: {
      const auto& store = s.as<op::StoreGlobal>();
      line(fmt::format("store {} = {}", at(paramName(k, store.param), store.index), exprString(k, store.value)));
      return true;
    }
    case Stmt::Kind::StoreShared: {
      const auto& store = s.as<op::StoreShared>();
      line(fmt::format("store shared {} = {}", at(sharedName(k, store.shared), store.index), exprString(k, store.value)));
      return true;
    }
    case Stmt::Kind::LoadVector: {
      const auto& load = s.as<op::LoadVector>();
      line(fmt::format("{} = load{} {}", floats(load.slots, 0, load.slots.size()), load.slots.size(),
                       at(paramName(k, load.param), load.index)));
      return true;
    }
    case Stmt::Kind::LoadSharedVector: {
      const auto& load = s.as<op::LoadSharedVector>();
      line(fmt::format("{} = load{} shared {}", floats(load.slots, 0, load.slots.size()), load.slots.size(),
                       at(sharedName(k, load.shared), load.index)));
      return true;
    }
    case Stmt::Kind::StoreVector: {
      const auto& store = s.as<op::StoreVector>();
      std::vector<std::string> values;
      for (auto& v : store.values) values.push_back(exprString(k, v));
      line(fmt::format("store{} {} = ({})", store.values.size(), at(paramName(k, store.param), store.index), fmt::join(values, ", ")));
      return true;
    }
    case Stmt::Kind::CpAsync: {
      const auto& copy = s.as<op::CpAsync>();
      line(fmt::format("cp.async{} shared {} <- {}{}", copy.bytes, at(sharedName(k, copy.shared), copy.sharedIndex),
                       at(paramName(k, copy.param), copy.globalIndex),
                       copy.validBytes ? fmt::format(" valid {} bytes", idxString(copy.validBytes)) : std::string()));
      return true;
    }
    case Stmt::Kind::Ldmatrix: {
      const auto& ld = s.as<op::Ldmatrix>();
      std::vector<std::string> slots;
      std::visit(Overloaded{[&](const op::FloatSlots& f) { for (int slot : f.slots) slots.push_back(floatName(k, slot)); },
                            [&](const op::PairRegs& p) { for (int r : p.regs) slots.push_back(pairName(k, r)); }},
                 ld.into);
      line(fmt::format("{} = ldmatrix.x{}{} shared {}", fmt::join(slots, ", "), ld.matrices(), ld.transpose ? ".trans" : "",
                       at(sharedName(k, ld.shared), ld.rowIndex)));
      return true;
    }
    default: return false;
  }
}

bool BlockPrinter::synchronization(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::Barrier: line("barrier"); return true;
    case Stmt::Kind::NamedBarrier: {
      const auto& bar = s.as<op::NamedBarrier>();
      line(fmt::format("barrier {} of {} threads", bar.id, bar.threads));
      return true;
    }
    case Stmt::Kind::BlockTicket: {
      const auto& ticket = s.as<op::BlockTicket>();
      line(fmt::format("{} = ticket {} of {}", ticket.name, counter(ticket.counter), ticket.blocks));
      return true;
    }
    case Stmt::Kind::CounterRelease: line(fmt::format("counter.release {}", counter(s.as<op::CounterRelease>().counter))); return true;
    case Stmt::Kind::CounterAwait: {
      const auto& await = s.as<op::CounterAwait>();
      line(fmt::format("counter.await {} == {}, then 0", counter(await.counter), idxString(await.count)));
      return true;
    }
    case Stmt::Kind::ClusterBarrier: line("cluster.barrier"); return true;
    case Stmt::Kind::FenceMbarrierInit: line("fence.mbarrier_init.cluster"); return true;
    case Stmt::Kind::CpAsyncCommit: line("cp.async.commit"); return true;
    case Stmt::Kind::CpAsyncWait: line(fmt::format("cp.async.wait {}", s.as<op::CpAsyncWait>().pendingGroups)); return true;
    case Stmt::Kind::WgmmaFence: line("wgmma.fence"); return true;
    case Stmt::Kind::WgmmaCommit: line("wgmma.commit_group"); return true;
    case Stmt::Kind::WgmmaWait: line(fmt::format("wgmma.wait_group {}", s.as<op::WgmmaWait>().pendingGroups)); return true;
    case Stmt::Kind::FenceProxyAsync: line("fence.proxy.async.shared"); return true;
    default: return mbarriers(s);
  }
}

bool BlockPrinter::mbarriers(const Stmt& s) {
  const op::Mbarrier* barrier = op::mbarrierOf(s.op);
  if (!barrier) return false;
  const std::string bar = at(sharedName(k, barrier->buffer), barrier->index);
  const char* elected = op::isElected(s.op) ? "elected " : "";
  switch (s.kind) {
    case Stmt::Kind::MbarrierInit: line(fmt::format("mbarrier.init {}, {} arrivals", bar, s.as<op::MbarrierInit>().arrivals)); return true;
    case Stmt::Kind::MbarrierArriveCluster: line(fmt::format("mbarrier.arrive.cluster {}", bar)); return true;
    case Stmt::Kind::MbarrierArrive: line(fmt::format("mbarrier.arrive {}", bar)); return true;
    case Stmt::Kind::CpAsyncMbarrierArrive: line(fmt::format("cp.async.mbarrier.arrive {}", bar)); return true;
    case Stmt::Kind::MbarrierExpectTx:
      line(fmt::format("{}mbarrier.arrive.expect_tx {}, {} bytes", elected, bar, s.as<op::MbarrierExpectTx>().bytes));
      return true;
    case Stmt::Kind::MbarrierWait: line(fmt::format("mbarrier.wait {} parity {}", bar, idxString(s.as<op::MbarrierWait>().parity))); return true;
    case Stmt::Kind::TmaLoad: {
      const auto& tma = s.as<op::TmaLoad>();
      line(fmt::format("{}tma.load{} shared {} <- tmap{}[row {}, col {}] on {}", elected, tma.multicast ? ".multicast" : "",
                       at(sharedName(k, tma.shared), tma.sharedIndex), tma.tensorMap, idxString(tma.row), idxString(tma.col), bar));
      return true;
    }
    default: return false;
  }
}

bool BlockPrinter::compute(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::Assign: line(fmt::format("{} = {}", floatName(k, s.as<op::Assign>().slot), exprString(k, s.as<op::Assign>().value))); return true;
    case Stmt::Kind::PackPair: {
      const auto& pack = s.as<op::PackPair>();
      line(fmt::format("{} = pack.{} {}, {}", pairName(k, pack.reg), dtypeName(pack.type), floatName(k, pack.lo), floatName(k, pack.hi)));
      return true;
    }
    case Stmt::Kind::ShuffleXor: {
      const auto& shfl = s.as<op::ShuffleXor>();
      line(fmt::format("{} = shfl.xor {}, {}", floatName(k, shfl.dst), floatName(k, shfl.src), shfl.laneMask));
      return true;
    }
    case Stmt::Kind::Mma: mma(s); return true;
    case Stmt::Kind::Wgmma: wgmma(s); return true;
    default: return false;
  }
}

void BlockPrinter::mma(const Stmt& s) {
  const auto& mma = s.as<op::Mma>();
  const auto type = dtypeName(mma.operandType);
  const std::string c = floats(mma.c, 0, mma.c.size());
  auto regs = [&](const std::vector<int>& list) {
    std::vector<std::string> names;
    for (int r : list) names.push_back(pairName(k, r));
    return fmt::format("{}", fmt::join(names, ", "));
  };
  auto pairs = [&](int buffer, const std::vector<Idx>& list) {
    std::vector<std::string> names;
    for (const Idx& e : list) names.push_back(at(sharedName(k, buffer), e));
    return fmt::format("{}", fmt::join(names, ", "));
  };
  std::visit(Overloaded{[&](const op::MmaFromPairs& o) {
                          line(fmt::format("mma.m16n8k16.{} {{{}}} += {{{}}} x {{{}}}", type, c, regs(o.a), regs(o.b)));
                        },
                        [&](const op::MmaFromShared& o) {  // A and B pairs straight from shared memory
                          line(fmt::format("mma.m16n8k16.{} {{{}}} += pairs {{{}}} x pairs {{{}}}", type, c, pairs(o.bufferA, o.aPairs),
                                           pairs(o.bufferB, o.bPairs)));
                        },
                        [&](const op::MmaFromSlots& o) {
                          line(fmt::format("mma.m16n8k16.{} {{{}}} += {{{}}} x {{{}}}", type, c, floats(o.a, 0, o.a.size()),
                                           floats(o.b, 0, o.b.size())));
                        }},
             mma.operands);
}

// A wgmma operand's shared layout, every field: `(mn-major 128-byte-swizzled core matrices k 512 row 1024)`.
std::string coreMatrices(const Stmt::CoreMatrices& m) {
  return fmt::format("({}{}core matrices k {} row {})", m.mnMajor ? "mn-major " : "", m.swizzle128 ? "128-byte-swizzled " : "", m.kStride,
                     m.rowStride);
}

void BlockPrinter::wgmma(const Stmt& s) {
  const auto& w = s.as<op::Wgmma>();
  // The accumulators (up to 128) as a range first .. last where they are consecutive slots, as they always are in kiln's
  // lowerings; listed otherwise.
  bool consecutive = true;
  for (size_t i = 1; i < w.acc.size(); ++i) consecutive = consecutive && w.acc[i] == w.acc[0] + static_cast<int>(i);
  std::string acc = w.acc.empty() ? std::string("{}")
                    : consecutive ? fmt::format("{{{} .. {}}}", floatName(k, w.acc.front()), floatName(k, w.acc.back()))
                                  : fmt::format("{{{}}}", floats(w.acc, 0, w.acc.size()));
  std::string a = std::visit(Overloaded{[&](const op::PairRegs& p) {
                                          std::vector<std::string> regs;
                                          for (int r : p.regs) regs.push_back(pairName(k, r));
                                          return fmt::format("registers {}", fmt::join(regs, " "));
                                        },
                                        [&](const op::SharedMatrix& m) {
                                          return fmt::format("shared {} {}", at(sharedName(k, m.buffer), m.start), coreMatrices(m.layout));
                                        }},
                             w.a);
  line(fmt::format("wgmma.m64n{}k16.{} {} {} {} x shared {} {}", w.n, dtypeName(w.operandType), acc,
                   w.scaleD ? fmt::format("+= (unless {} is 0)", idxString(w.scaleD)) : "+=", a, at(sharedName(k, w.b.buffer), w.b.start),
                   coreMatrices(w.b.layout)));
}

void printBlock(const Kernel& k, const Block& body, int depth, std::vector<std::string>& lines) {
  BlockPrinter p{k, lines, std::string(2 * depth, ' ')};
  for (auto& s : body) {
    if (p.control(s, depth) || p.memory(s) || p.synchronization(s) || p.compute(s)) continue;
    p.line(fmt::format("?kind {}", static_cast<int>(s.kind)));
  }
}

std::string paramString(const Program& p, const Param& prm) {
  return fmt::format("{} {}: {}[{}]{}", prm.written ? "out" : "in", prm.name, dtypeName(prm.dtype), prm.elements,
                     prm.written ? " (written)" : "");
}

std::string tensorMapString(const Kernel& k, int i) {
  const TensorMap& m = k.tensorMaps[static_cast<size_t>(i)];
  return fmt::format("tmap{}: {}[{} + row * {} + col], {} rows x {} cols, boxes of {} x {}{}{}", i, paramName(k, m.param), m.offset,
                     m.rowStride, m.rows, m.cols, m.boxRows, m.boxCols, m.swizzle128 ? ", swizzle 128B" : "",
                     m.multicastParts > 0 ? fmt::format(", multicast in {} parts", m.multicastParts) : "");
}

std::string dims(const std::array<int64_t, 3>& d) { return fmt::format("({},{},{})", d[0], d[1], d[2]); }

std::vector<std::string> bufferNames(const Program& p, const std::vector<int>& ids) {
  std::vector<std::string> names;
  for (int b : ids) names.push_back(b >= 0 && b < static_cast<int>(p.buffers.size()) ? p.buffers[b].name : fmt::format("?{}", b));
  return names;
}

std::vector<std::string> bodyLines(const Kernel& k) {
  std::vector<std::string> lines;
  printBlock(k, k.body, 1, lines);
  return lines;
}

}  // namespace

std::string print(const Program& p) {
  std::string out = fmt::format("// kiln kernel IR: {}\ntarget {}\n", p.modelName, p.target.arch);
  for (auto& b : p.buffers) {
    out += fmt::format("buffer {} : {}[{}] {}", b.name, dtypeName(b.dtype), shapeString(b.shape), loop::bufferKindName(b.kind));
    if (b.weight) out += fmt::format(" \"{}\"", b.weight->name);
    out += "\n";
  }
  out += fmt::format("inputs{}{}\n", p.inputs.empty() ? "" : " ", fmt::join(bufferNames(p, p.inputs), ", "));
  for (auto [output, input] : p.inPlace)
    out += fmt::format("in_place {}, {}\n", p.buffers[static_cast<size_t>(output)].name, p.buffers[static_cast<size_t>(input)].name);
  for (auto& k : p.kernels) {
    out += fmt::format("\nkernel {} grid{} block{} shared {} bytes", k.name, dims(k.grid), dims(k.block), k.sharedBytes());
    if (k.dynamicSharedBytes) out += fmt::format(" (dynamic {} bytes)", k.dynamicSharedBytes);
    if (k.cluster > 1) out += fmt::format(" cluster {}", k.cluster);
    if (k.groups > 1) out += fmt::format(" groups {}", k.groups);
    if (k.programmaticLaunch) out += " programmatic-launch";
    if (!k.origins.empty()) out += fmt::format("  // {}", fmt::join(k.origins, "; "));
    out += "\n";
    std::vector<std::string> params;
    for (auto& prm : k.params) params.push_back(paramString(p, prm));
    out += fmt::format("  params: {}\n", fmt::join(params, ", "));
    for (size_t i = 0; i < k.tensorMaps.size(); ++i) out += fmt::format("  {}\n", tensorMapString(k, static_cast<int>(i)));
    for (size_t i = 0; i < k.shared.size(); ++i) {
      const SharedBuffer& s = k.shared[i];
      out += fmt::format("  shared {}: {}[{}]", s.name, s.mbarriers ? "mbarrier" : dtypeName(s.dtype), s.elements);
      if (s.dynamic) out += fmt::format(" dynamic at byte {}", k.dynamicSharedOffset(static_cast<int>(i)));
      out += "\n";
    }
    if (!k.floatVars.empty()) {
      std::vector<std::string> fv;
      for (size_t i = 0; i < k.floatVars.size(); ++i) fv.push_back(floatName(k, static_cast<int>(i)));
      out += fmt::format("  floats: {}\n", fmt::join(fv, ", "));
    }
    if (!k.pairVars.empty()) {
      std::vector<std::string> pv;
      for (size_t i = 0; i < k.pairVars.size(); ++i) pv.push_back(pairName(k, static_cast<int>(i)));
      out += fmt::format("  pairs: {}\n", fmt::join(pv, ", "));
    }
    for (auto& line : bodyLines(k)) out += line + "\n";
  }
  out += fmt::format("\nreturn {}\n", fmt::join(bufferNames(p, p.outputs), ", "));
  return out;
}

nlohmann::json toJson(const Program& p) {
  nlohmann::json j{{"level", "kernel"}, {"model", p.modelName}, {"inputs", p.inputs}, {"outputs", p.outputs}};
  j["buffers"] = nlohmann::json::array();
  for (auto& b : p.buffers) {
    nlohmann::json bj{{"name", b.name}, {"kind", loop::bufferKindName(b.kind)}, {"dtype", dtypeName(b.dtype)}, {"shape", b.shape}};
    if (b.weight) bj["weight"] = b.weight->name;
    j["buffers"].push_back(bj);
  }
  j["kernels"] = nlohmann::json::array();
  for (auto& k : p.kernels) {
    nlohmann::json kj{{"name", k.name},
                      {"grid", k.grid},
                      {"block", k.block},
                      {"shared_bytes", k.sharedBytes()},
                      {"dynamic_shared_bytes", k.dynamicSharedBytes},
                      {"origins", k.origins},
                      {"float_vars", k.floatVars}};
    if (!k.pairVars.empty()) kj["pair_vars"] = k.pairVars;
    if (k.cluster > 1) kj["cluster"] = k.cluster;
    if (k.groups > 1) kj["groups"] = k.groups;
    if (k.programmaticLaunch) kj["programmatic_launch"] = true;
    kj["params"] = nlohmann::json::array();
    for (auto& prm : k.params)
      kj["params"].push_back({{"buffer", prm.buffer},
                              {"name", prm.name},
                              {"dtype", dtypeName(prm.dtype)},
                              {"elements", prm.elements},
                              {"written", prm.written}});
    kj["shared"] = nlohmann::json::array();
    for (size_t i = 0; i < k.shared.size(); ++i) {
      const SharedBuffer& s = k.shared[i];
      nlohmann::json sj{{"name", s.name}, {"dtype", dtypeName(s.dtype)}, {"elements", s.elements}};
      if (s.dynamic) sj["dynamic_offset"] = k.dynamicSharedOffset(static_cast<int>(i));
      kj["shared"].push_back(sj);
    }
    for (size_t i = 0; i < k.tensorMaps.size(); ++i) kj["tensor_maps"].push_back(tensorMapString(k, static_cast<int>(i)));
    kj["body"] = bodyLines(k);
    j["kernels"].push_back(kj);
  }
  return j;
}

}  // namespace kiln::kernel
