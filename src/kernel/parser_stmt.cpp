// Kernel IR parser: statements, one function per family of printed lines (printer.cpp writes them; see
// parser_internal.h). Statements are built field by field, as the constructors in ir.cpp build them, but without
// their assertions: a count or operand that is wrong in the text is the verifier's to report, as a user error.
#include <fmt/format.h>

#include <cctype>
#include <functional>

#include "kiln/support/error.h"
#include "parser_internal.h"

namespace kiln::kernel::parse_detail {
namespace {

// `NAME[IDX]` of a shared buffer: the buffer and the index.
std::pair<int, Idx> sharedAt(Cursor& c, KernelScope& s) {
  int buffer = s.shared(c);
  c.expect("[");
  Idx i = parseIdx(c, s);
  c.expect("]");
  return {buffer, i};
}

std::pair<int, Idx> paramAt(Cursor& c, KernelScope& s) {
  int param = s.param(c);
  c.expect("[");
  Idx i = parseIdx(c, s);
  c.expect("]");
  return {param, i};
}

// `%a, %b, ...` or `$a, $b, ...` up to `=`: float slots into `slots`, pair registers into `regs`.
void destinations(Cursor& c, KernelScope& s, std::vector<int>& slots, std::vector<int>& regs) {
  do {
    if (c.startsWith("$")) regs.push_back(s.pairReg(c));
    else slots.push_back(s.floatSlot(c));
  } while (c.accept(","));
  c.expect("=");
}

// `{%a, %b}` or `{$a, $b}` into `slots` / `regs`.
void braced(Cursor& c, KernelScope& s, std::vector<int>& slots, std::vector<int>& regs) {
  c.expect("{");
  if (c.accept("}")) return;
  do {
    if (c.startsWith("$")) regs.push_back(s.pairReg(c));
    else slots.push_back(s.floatSlot(c));
  } while (c.accept(","));
  c.expect("}");
}

Stmt control(Cursor& c, KernelScope& s, LineReader& lines, bool isFor) {
  Stmt st;
  size_t mark = s.vars.size();
  if (isFor) {
    op::For loop;
    loop.name = c.word();
    c.expect("in");
    loop.begin = parseIdx(c, s);
    c.expect("..");
    loop.end = parseIdx(c, s);
    c.expect("step");
    loop.step = c.integer();
    if (c.acceptWord("unroll")) {
      c.expect("ring");
      loop.unrollRing = c.integer();
    }
    loop.var = s.defineVar(loop.name);
    st = Stmt::of(Stmt::Kind::For, std::move(loop));
  } else {
    op::If cond;
    c.expect("(");
    cond.lhs = parseIdx(c, s);
    c.expect("<");
    cond.rhs = parseIdx(c, s);
    c.expect(")");
    st = Stmt::of(Stmt::Kind::If, std::move(cond));
  }
  c.expect("{");
  if (!c.atEnd()) c.fail("expected the end of the line after '{'");
  st.body = parseBlock(lines, s, true);
  s.vars.resize(mark);
  return st;
}

Stmt store(Cursor& c, KernelScope& s) {
  if (c.acceptWord("shared")) {
    op::StoreShared store;
    std::tie(store.shared, store.index) = sharedAt(c, s);
    c.expect("=");
    store.value = parseFExpr(c, s);
    return Stmt::of(Stmt::Kind::StoreShared, std::move(store));
  }
  auto rest = c.rest();
  bool vector = !rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0]));
  int64_t width = vector ? c.integer() : 0;
  auto [param, index] = paramAt(c, s);
  c.expect("=");
  if (!vector) return Stmt::of(Stmt::Kind::StoreGlobal, op::StoreGlobal{param, std::move(index), parseFExpr(c, s)});
  op::StoreVector store{param, std::move(index), {}};
  size_t col = c.here();
  c.expect("(");
  do store.values.push_back(parseFExpr(c, s));
  while (c.accept(","));
  c.expect(")");
  if (static_cast<int64_t>(store.values.size()) != width)
    c.fail(fmt::format("store{} with {} values", width, store.values.size()), col);
  return Stmt::of(Stmt::Kind::StoreVector, std::move(store));
}

Stmt barriers(Cursor& c) {
  if (c.atEnd()) return Stmt::of(Stmt::Kind::Barrier);
  op::NamedBarrier bar;
  bar.id = static_cast<int>(c.integer());
  c.expect("of");
  bar.threads = c.integer();
  c.expect("threads");
  return Stmt::of(Stmt::Kind::NamedBarrier, bar);
}

op::Counter counterAt(Cursor& c, KernelScope& s) {
  op::Counter counter;
  std::tie(counter.param, counter.index) = paramAt(c, s);
  return counter;
}

Stmt counter(Cursor& c, KernelScope& s, bool await) {
  op::Counter counter = counterAt(c, s);
  if (!await) return Stmt::of(Stmt::Kind::CounterRelease, op::CounterRelease{std::move(counter)});
  c.expect("==");
  Idx count = parseIdx(c, s);
  c.expect(", then 0");
  return Stmt::of(Stmt::Kind::CounterAwait, op::CounterAwait{std::move(counter), std::move(count)});
}

Stmt cpAsync(Cursor& c, KernelScope& s) {
  op::CpAsync copy;
  copy.bytes = static_cast<int>(c.integer());
  c.expect("shared");
  std::tie(copy.shared, copy.sharedIndex) = sharedAt(c, s);
  c.expect("<-");
  std::tie(copy.param, copy.globalIndex) = paramAt(c, s);
  if (c.acceptWord("valid")) {
    copy.validBytes = parseIdx(c, s);
    c.expect("bytes");
  }
  return Stmt::of(Stmt::Kind::CpAsync, std::move(copy));
}

op::Mbarrier barrierAt(Cursor& c, KernelScope& s) {
  op::Mbarrier barrier;
  std::tie(barrier.buffer, barrier.index) = sharedAt(c, s);
  return barrier;
}

Stmt onMbarrier(Cursor& c, KernelScope& s, Stmt::Kind kind) {
  op::Mbarrier barrier = barrierAt(c, s);
  switch (kind) {
    case Stmt::Kind::MbarrierInit: {
      c.expect(",");
      op::MbarrierInit init{std::move(barrier), c.integer()};
      c.expect("arrivals");
      return Stmt::of(kind, std::move(init));
    }
    case Stmt::Kind::MbarrierExpectTx: {
      c.expect(",");
      op::MbarrierExpectTx expect{std::move(barrier), c.integer()};
      c.expect("bytes");
      return Stmt::of(kind, std::move(expect));
    }
    case Stmt::Kind::MbarrierWait: {
      c.expect("parity");
      Idx parity = parseIdx(c, s);
      return Stmt::of(kind, op::MbarrierWait{std::move(barrier), std::move(parity)});
    }
    case Stmt::Kind::MbarrierArrive: return Stmt::of(kind, op::MbarrierArrive{std::move(barrier)});
    case Stmt::Kind::MbarrierArriveCluster: return Stmt::of(kind, op::MbarrierArriveCluster{std::move(barrier)});
    case Stmt::Kind::CpAsyncMbarrierArrive: return Stmt::of(kind, op::CpAsyncMbarrierArrive{std::move(barrier)});
    default: KILN_ASSERT(false, "onMbarrier: not an mbarrier statement");
  }
  return Stmt::of(kind);
}

Stmt tmaLoad(Cursor& c, KernelScope& s) {
  op::TmaLoad tma;
  tma.multicast = c.accept(".multicast");
  c.expect("shared");
  std::tie(tma.shared, tma.sharedIndex) = sharedAt(c, s);
  c.expect("<-");
  c.expect("tmap");
  size_t col = c.here();
  tma.tensorMap = static_cast<int>(c.integer());
  if (tma.tensorMap < 0 || tma.tensorMap >= static_cast<int>(s.kernel.tensorMaps.size()))
    c.fail(fmt::format("tensor map tmap{} is not declared", tma.tensorMap), col);
  c.expect("[row");
  tma.row = parseIdx(c, s);
  c.expect(", col");
  tma.col = parseIdx(c, s);
  c.expect("]");
  c.expect("on");
  tma.barrier = barrierAt(c, s);
  return Stmt::of(Stmt::Kind::TmaLoad, std::move(tma));
}

Stmt elected(Cursor& c, KernelScope& s) {
  if (c.accept("tma.load")) return kernel::elected(tmaLoad(c, s));
  if (c.accept("mbarrier.arrive.expect_tx")) return kernel::elected(onMbarrier(c, s, Stmt::Kind::MbarrierExpectTx));
  c.fail("expected tma.load or mbarrier.arrive.expect_tx after 'elected'");
}

// `{S[i], S[i], ...}` of mma's pairs from shared memory: the buffer (one for all) and the indices.
int sharedPairs(Cursor& c, KernelScope& s, std::vector<Idx>& pairs) {
  c.expect("pairs");
  c.expect("{");
  int buffer = -1;
  do {
    size_t col = c.here();
    auto [b, i] = sharedAt(c, s);
    if (buffer >= 0 && b != buffer) c.fail("an operand's pairs must all come from one shared buffer", col);
    buffer = b;
    pairs.push_back(i);
  } while (c.accept(","));
  c.expect("}");
  return buffer;
}

Stmt mma(Cursor& c, KernelScope& s) {
  op::Mma mma;
  mma.operandType = parseDTypeWord(c);
  std::vector<int> none;
  braced(c, s, mma.c, none);
  c.expect("+=");
  if (c.startsWith("pairs")) {
    op::MmaFromShared shared;
    shared.bufferA = sharedPairs(c, s, shared.aPairs);
    c.expect("x");
    shared.bufferB = sharedPairs(c, s, shared.bPairs);
    mma.operands = std::move(shared);
  } else {
    size_t col = c.here();
    std::vector<int> a, b, aRegs, bRegs;
    braced(c, s, a, aRegs);
    c.expect("x");
    braced(c, s, b, bRegs);
    if (aRegs.empty() && bRegs.empty()) mma.operands = op::MmaFromSlots{std::move(a), std::move(b)};
    else if (a.empty() && b.empty()) mma.operands = op::MmaFromPairs{std::move(aRegs), std::move(bRegs)};
    else c.fail("mma's A and B are either all float slots or all pair registers", col);
  }
  if (!none.empty()) c.fail("mma's accumulators are float slots, not pair registers");
  return Stmt::of(Stmt::Kind::Mma, std::move(mma));
}

// `(mn-major 128-byte-swizzled core matrices k K row R)`
op::CoreMatrices coreMatrices(Cursor& c) {
  op::CoreMatrices m;
  c.expect("(");
  m.mnMajor = c.accept("mn-major");
  m.swizzle128 = c.accept("128-byte-swizzled");
  c.expect("core matrices k");
  m.kStride = c.integer();
  c.expect("row");
  m.rowStride = c.integer();
  c.expect(")");
  return m;
}

// `NAME[IDX] (core matrices ...)`: a wgmma operand in shared memory.
op::SharedMatrix sharedMatrix(Cursor& c, KernelScope& s) {
  op::SharedMatrix m;
  std::tie(m.buffer, m.start) = sharedAt(c, s);
  m.layout = coreMatrices(c);
  return m;
}

Stmt wgmma(Cursor& c, KernelScope& s) {
  op::Wgmma w;
  w.n = c.integer();
  c.expect("k16.");
  w.operandType = parseDTypeWord(c);
  c.expect("{");
  if (!c.accept("}")) {
    int first = s.floatSlot(c);
    if (c.accept("..")) {  // the accumulators as a range of consecutive slots
      int last = s.floatSlot(c);
      for (int i = first; i <= last; ++i) w.acc.push_back(i);
    } else {
      w.acc.push_back(first);
      while (c.accept(",")) w.acc.push_back(s.floatSlot(c));
    }
    c.expect("}");
  }
  c.expect("+=");
  if (c.accept("(unless")) {
    w.scaleD = parseIdx(c, s);
    c.expect("is 0)");
  }
  if (c.acceptWord("registers")) {
    op::PairRegs regs;
    for (int i = 0; i < 4; ++i) regs.regs.push_back(s.pairReg(c));
    w.a = std::move(regs);
  } else {
    c.expect("shared");
    w.a = sharedMatrix(c, s);
  }
  c.expect("x shared");
  w.b = sharedMatrix(c, s);
  return Stmt::of(Stmt::Kind::Wgmma, std::move(w));
}

Stmt wgmmaFamily(Cursor& c, KernelScope& s) {
  if (c.accept(".fence")) return Stmt::of(Stmt::Kind::WgmmaFence);
  if (c.accept(".commit_group")) return Stmt::of(Stmt::Kind::WgmmaCommit);
  if (c.accept(".wait_group")) return Stmt::of(Stmt::Kind::WgmmaWait, op::WgmmaWait{static_cast<int>(c.integer())});
  c.expect(".m64n");
  return wgmma(c, s);
}

// Lines that start with `%` or `$`: destinations, then what is assigned to them.
Stmt assignment(Cursor& c, KernelScope& s) {
  std::vector<int> slots, regs;
  size_t col = c.here();
  destinations(c, s, slots, regs);
  if (c.accept("ldmatrix.x")) {
    op::Ldmatrix ld;
    int64_t count = c.integer();
    ld.transpose = c.accept(".trans");
    c.expect("shared");
    std::tie(ld.shared, ld.rowIndex) = sharedAt(c, s);
    if (!slots.empty() == !regs.empty() || count != static_cast<int64_t>(regs.empty() ? slots.size() / 2 : regs.size()))
      c.fail(fmt::format("ldmatrix.x{} needs {} float slots or {} pair registers", count, 2 * count, count), col);
    if (regs.empty()) ld.into = op::FloatSlots{slots};
    else ld.into = op::PairRegs{regs};
    return Stmt::of(Stmt::Kind::Ldmatrix, std::move(ld));
  }
  if (!regs.empty()) {
    if (regs.size() != 1 || !slots.empty()) c.fail("expected '$pair = pack.TYPE %lo, %hi'", col);
    op::PackPair pack;
    c.expect("pack.");
    pack.type = parseDTypeWord(c);
    pack.reg = regs[0];
    pack.lo = s.floatSlot(c);
    c.expect(",");
    pack.hi = s.floatSlot(c);
    return Stmt::of(Stmt::Kind::PackPair, pack);
  }
  if (c.startsWith("load") && c.rest().size() > 4 && std::isdigit(static_cast<unsigned char>(c.rest()[4]))) {
    c.accept("load");
    size_t wcol = c.here();
    int64_t width = c.integer();
    bool shared = c.acceptWord("shared");
    auto [buffer, index] = shared ? sharedAt(c, s) : paramAt(c, s);
    if (width != static_cast<int64_t>(slots.size())) c.fail(fmt::format("load{} into {} slots", width, slots.size()), wcol);
    if (shared) return Stmt::of(Stmt::Kind::LoadSharedVector, op::LoadSharedVector{buffer, std::move(index), slots});
    return Stmt::of(Stmt::Kind::LoadVector, op::LoadVector{buffer, std::move(index), slots});
  }
  if (slots.size() != 1) c.fail("expected one float slot on the left of '='", col);
  if (c.accept("shfl.xor")) {
    op::ShuffleXor shfl;
    shfl.dst = slots[0];
    shfl.src = s.floatSlot(c);
    c.expect(",");
    shfl.laneMask = static_cast<int>(c.integer());
    return Stmt::of(Stmt::Kind::ShuffleXor, shfl);
  }
  return Stmt::of(Stmt::Kind::Assign, op::Assign{slots[0], parseFExpr(c, s)});
}

// `NAME = IDX [(warp-uniform)]` or `NAME = ticket P[IDX] of N`: the name is in scope after the line.
Stmt definition(Cursor& c, KernelScope& s) {
  std::string name = c.word();
  c.expect("=");
  if (c.acceptWord("ticket")) {
    op::BlockTicket ticket;
    ticket.counter = counterAt(c, s);
    c.expect("of");
    ticket.blocks = c.integer();
    ticket.name = name;
    ticket.var = s.defineVar(name);
    return Stmt::of(Stmt::Kind::BlockTicket, std::move(ticket));
  }
  op::DefIdx def;
  def.value = parseIdx(c, s);
  def.warpUniform = c.accept("(warp-uniform)");
  def.name = name;
  def.var = s.defineVar(name);
  return Stmt::of(Stmt::Kind::DefIdx, std::move(def));
}

using Handler = std::function<Stmt(Cursor&, KernelScope&, LineReader&)>;

// Prefixes in the order they are tried: a longer spelling before any it starts with.
const std::vector<std::pair<std::string_view, Handler>>& handlers() {
  using K = Stmt::Kind;
  auto plain = [](K kind) { return [kind](Cursor&, KernelScope&, LineReader&) { return Stmt::of(kind); }; };
  auto mbar = [](K kind) { return [kind](Cursor& c, KernelScope& s, LineReader&) { return onMbarrier(c, s, kind); }; };
  static const std::vector<std::pair<std::string_view, Handler>> table = {
      {"for ", [](Cursor& c, KernelScope& s, LineReader& l) { return control(c, s, l, true); }},
      {"if ", [](Cursor& c, KernelScope& s, LineReader& l) { return control(c, s, l, false); }},
      {"store", [](Cursor& c, KernelScope& s, LineReader&) { return store(c, s); }},
      {"barrier", [](Cursor& c, KernelScope&, LineReader&) { return barriers(c); }},
      {"counter.release", [](Cursor& c, KernelScope& s, LineReader&) { return counter(c, s, false); }},
      {"counter.await", [](Cursor& c, KernelScope& s, LineReader&) { return counter(c, s, true); }},
      {"cluster.barrier", plain(K::ClusterBarrier)},
      {"fence.mbarrier_init.cluster", plain(K::FenceMbarrierInit)},
      {"fence.proxy.async.shared", plain(K::FenceProxyAsync)},
      {"cp.async.commit", plain(K::CpAsyncCommit)},
      {"cp.async.wait",
       [](Cursor& c, KernelScope&, LineReader&) { return Stmt::of(K::CpAsyncWait, op::CpAsyncWait{static_cast<int>(c.integer())}); }},
      {"cp.async.mbarrier.arrive", mbar(K::CpAsyncMbarrierArrive)},
      {"cp.async", [](Cursor& c, KernelScope& s, LineReader&) { return cpAsync(c, s); }},
      {"mbarrier.init", mbar(K::MbarrierInit)},
      {"mbarrier.arrive.cluster", mbar(K::MbarrierArriveCluster)},
      {"mbarrier.arrive.expect_tx", mbar(K::MbarrierExpectTx)},
      {"mbarrier.arrive", mbar(K::MbarrierArrive)},
      {"mbarrier.wait", mbar(K::MbarrierWait)},
      {"elected ", [](Cursor& c, KernelScope& s, LineReader&) { return elected(c, s); }},
      {"tma.load", [](Cursor& c, KernelScope& s, LineReader&) { return tmaLoad(c, s); }},
      {"mma.m16n8k16.", [](Cursor& c, KernelScope& s, LineReader&) { return mma(c, s); }},
      {"wgmma", [](Cursor& c, KernelScope& s, LineReader&) { return wgmmaFamily(c, s); }},
      {"%", [](Cursor& c, KernelScope& s, LineReader&) { return assignment(c, s); }},
      {"$", [](Cursor& c, KernelScope& s, LineReader&) { return assignment(c, s); }},
  };
  return table;
}

// `NAME = ...` (a definition) rather than a statement keyword: variable names may start like one (`barrier_slot`).
bool definesName(std::string_view line) {
  size_t i = line.find_first_not_of(' ');
  size_t end = i;
  while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_' || line[end] == '.')) ++end;
  return end > i && line.substr(end, 3) == " = ";
}

}  // namespace

Stmt parseStatement(Cursor& c, KernelScope& s, LineReader& lines) {
  if (definesName(c.rest())) return definition(c, s);
  for (auto& [prefix, handler] : handlers()) {
    if (!c.startsWith(prefix)) continue;
    // `%` and `$` stay for the destinations; `store`, `barrier` and `wgmma` are followed by what distinguishes them.
    if (prefix != "%" && prefix != "$") c.accept(prefix);
    return handler(c, s, lines);
  }
  return definition(c, s);
}

Block parseBlock(LineReader& lines, KernelScope& s, bool closed) {
  Block block;
  size_t mark = s.vars.size();
  while (!lines.done()) {
    const Line& line = lines.peek();
    std::string_view text = line.text;
    if (text.empty() || text[0] != ' ') break;  // the kernel's end
    lines.take();
    Cursor c(lines.file(), line.number, text);
    if (c.accept("}")) {
      if (!closed) c.fail("'}' without an open 'for' or 'if'");
      s.vars.resize(mark);
      return block;
    }
    block.push_back(parseStatement(c, s, lines));
    if (!c.atEnd()) c.fail(fmt::format("unexpected '{}' after the statement", printable(std::string(c.rest().substr(0, 24)))));
  }
  if (closed) {
    Cursor c(lines.file(), lines.done() ? lines.lastLine() : lines.peek().number, "");
    c.fail("a 'for' or 'if' block is not closed by '}'");
  }
  s.vars.resize(mark);
  return block;
}

}  // namespace kiln::kernel::parse_detail
