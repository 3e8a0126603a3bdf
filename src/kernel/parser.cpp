// Kernel IR parser: the program around the statements (see kiln/kernel/parser.h): the header, the target, buffers,
// inputs and outputs, and each kernel's launch line and declarations.
#include "kiln/kernel/parser.h"

#include <fmt/format.h>

#include "kiln/loop/parser.h"
#include "kiln/tile/parser.h"
#include "kiln/support/error.h"
#include "parser_internal.h"

namespace kiln::kernel {
namespace parse_detail {

namespace {

std::vector<std::string> bufferNames(const Program& p) {
  std::vector<std::string> names;
  for (auto& b : p.buffers) names.push_back(b.name);
  return names;
}

std::array<int64_t, 3> dims(Cursor& c, std::string_view what) {
  c.expect(what);
  c.expect("(");
  std::array<int64_t, 3> d{};
  for (int i = 0; i < 3; ++i) {
    if (i) c.expect(",");
    d[static_cast<size_t>(i)] = c.integer();
  }
  c.expect(")");
  return d;
}

// `kernel NAME grid(..) block(..) shared N bytes [(dynamic N bytes)] [cluster N] [groups N] [programmatic-launch]
// [  // ORIGIN; ORIGIN]`
Kernel launchLine(Cursor& c) {
  Kernel k;
  k.name = c.word();
  k.grid = dims(c, "grid");
  k.block = dims(c, "block");
  c.expect("shared");
  c.integer();  // derived from the shared buffers
  c.expect("bytes");
  if (c.accept("(dynamic")) {
    k.dynamicSharedBytes = c.integer();
    c.expect("bytes)");
  }
  if (c.acceptWord("cluster")) k.cluster = c.integer();
  if (c.acceptWord("groups")) k.groups = c.integer();
  if (c.accept("programmatic-launch")) k.programmaticLaunch = true;
  if (c.accept("//")) k.origins = loop::parse_detail::origins(c);
  return k;
}

// `in NAME: DTYPE[N]` or `out NAME: DTYPE[N] (written)`, comma-separated; NAME is one of the program's buffers.
void params(Cursor& c, Kernel& k, const Program& p) {
  auto names = bufferNames(p);
  if (c.atEnd()) return;
  do {
    Param prm;
    bool out = c.acceptWord("out");
    if (!out && !c.acceptWord("in")) c.fail("expected 'in' or 'out' before a parameter");
    prm.buffer = c.oneOf(names, ":", "buffer (a parameter is named after its buffer)");
    prm.name = names[static_cast<size_t>(prm.buffer)];
    c.expect(":");
    prm.dtype = parseDTypeWord(c);
    c.expect("[");
    prm.elements = c.integer();
    c.expect("]");
    prm.written = c.accept("(written)");
    if (prm.written != out) c.fail(fmt::format("parameter {} is 'out' exactly when it is '(written)'", prm.name));
    k.params.push_back(prm);
  } while (c.accept(","));
}

// `tmapI: PARAM[OFFSET + row * STRIDE + col], R rows x C cols, boxes of BR x BC[, swizzle 128B][, multicast in N parts]`
void tensorMap(Cursor& c, Kernel& k) {
  size_t col = c.here();
  if (c.integer() != static_cast<int64_t>(k.tensorMaps.size())) c.fail("tensor maps are numbered from tmap0 in order", col);
  c.expect(":");
  std::vector<std::string> names;
  for (auto& prm : k.params) names.push_back(prm.name);
  TensorMap m;
  m.param = c.oneOf(names, "[", "kernel parameter");
  c.expect("[");
  m.offset = c.integer();
  c.expect("+ row *");
  m.rowStride = c.integer();
  c.expect("+ col],");
  m.rows = c.integer();
  c.expect("rows x");
  m.cols = c.integer();
  c.expect("cols, boxes of");
  m.boxRows = c.integer();
  c.expect("x");
  m.boxCols = c.integer();
  m.swizzle128 = c.accept(", swizzle 128B");
  if (c.accept(", multicast in")) {
    m.multicastParts = c.integer();
    c.expect("parts");
  }
  k.tensorMaps.push_back(m);
}

// `shared NAME: DTYPE[N] [dynamic at byte X]` or `shared NAME: mbarrier[N] ...`
void sharedBuffer(Cursor& c, Kernel& k) {
  SharedBuffer b;
  b.name = c.word();
  c.expect(":");
  if (c.acceptWord("mbarrier")) b.mbarriers = true;
  else b.dtype = parseDTypeWord(c);
  c.expect("[");
  b.elements = c.integer();
  c.expect("]");
  if (c.accept("dynamic at byte")) {
    b.dynamic = true;
    c.integer();  // derived from the buffers before it
  }
  k.shared.push_back(b);
}

// `%a, %b` or `$a, $b`: the names after the sigil.
std::vector<std::string> registerNames(Cursor& c, std::string_view sigil) {
  std::vector<std::string> names;
  if (c.atEnd()) return names;
  do {
    c.expect(sigil);
    names.push_back(c.word());
  } while (c.accept(","));
  return names;
}

// The declarations after the launch line, up to the first statement.
void declarations(LineReader& lines, Kernel& k, const Program& p) {
  while (!lines.done()) {
    const Line& line = lines.peek();
    Cursor c(lines.file(), line.number, line.text);
    if (line.text.rfind("  ", 0) != 0) return;
    if (c.accept("params:")) params(c, k, p);
    else if (c.accept("tmap")) tensorMap(c, k);
    else if (c.acceptWord("shared") && c.rest().find(':') != std::string_view::npos) sharedBuffer(c, k);
    else if (c.accept("floats:")) k.floatVars = registerNames(c, "%");
    else if (c.accept("pairs:")) k.pairVars = registerNames(c, "$");
    else return;
    if (!c.atEnd()) c.fail(fmt::format("unexpected '{}'", printable(std::string(c.rest().substr(0, 24)))));
    lines.take();
  }
}

Kernel kernel(Cursor& c, LineReader& lines, const Program& p) {
  Kernel k = launchLine(c);
  if (!c.atEnd()) c.fail(fmt::format("unexpected '{}' in the launch line", printable(std::string(c.rest().substr(0, 24)))));
  declarations(lines, k, p);
  KernelScope scope(k);
  k.body = parseBlock(lines, scope, false);
  return k;
}

// "in_place OUTPUT, INPUT": an output written on its input's bytes (Program::inPlace).
std::pair<int, int> inPlacePair(Cursor& c, const std::vector<loop::Buffer>& buffers) {
  const std::vector<int> pair = loop::parse_detail::bufferList(c, buffers);
  if (pair.size() != 2) c.fail("in_place names two buffers: the output, then the input whose bytes it is written on");
  const auto kind = [&](int b) { return buffers[static_cast<size_t>(b)].kind; };
  if (kind(pair[0]) != loop::Buffer::Kind::Output || kind(pair[1]) != loop::Buffer::Kind::Input)
    c.fail("in_place names an output, then an input");
  const loop::Buffer &out = buffers[static_cast<size_t>(pair[0])], &in = buffers[static_cast<size_t>(pair[1])];
  if (out.shape != in.shape || out.dtype != in.dtype)
    c.fail(fmt::format("in_place {}, {}: an output on its input's bytes has the input's type and shape", out.name, in.name));
  return {pair[0], pair[1]};
}

}  // namespace
}  // namespace parse_detail

Program parse(const std::string& text, const std::string& file) {
  using namespace parse_detail;
  LineReader lines(file, text);
  Program p;
  bool inputsGiven = false, returned = false;
  while (!lines.done()) {
    const Line& line = lines.take();
    Cursor c(file, line.number, line.text);
    if (c.atEnd()) continue;
    if (c.accept("// kiln kernel IR:")) {
      c.skipBlanks();
      p.modelName = std::string(c.rest());
      continue;
    }
    if (c.startsWith("//")) continue;
    if (returned) c.fail("nothing may follow the 'return' line");
    if (line.text[0] == ' ') c.fail("an indented line outside a kernel");
    if (c.acceptWord("target")) p.target = tile::parseTarget(c);
    else if (c.acceptWord("buffer")) p.buffers.push_back(loop::parse_detail::buffer(c));
    else if (c.acceptWord("inputs")) p.inputs = loop::parse_detail::bufferList(c, p.buffers), inputsGiven = true;
    else if (c.acceptWord("in_place")) p.inPlace.push_back(inPlacePair(c, p.buffers));
    else if (c.acceptWord("kernel")) p.kernels.push_back(kernel(c, lines, p));
    else if (c.acceptWord("return")) p.outputs = loop::parse_detail::bufferList(c, p.buffers), returned = true;
    else c.fail("expected 'target', 'buffer', 'inputs', 'in_place', 'kernel' or 'return'");
    if (!c.atEnd()) c.fail(fmt::format("unexpected '{}'", printable(std::string(c.rest().substr(0, 24)))));
  }
  if (!returned) Cursor(file, lines.lastLine(), "").fail("the program ends without its 'return' line");
  if (!inputsGiven)
    for (size_t i = 0; i < p.buffers.size(); ++i)
      if (p.buffers[i].kind == loop::Buffer::Kind::Input) p.inputs.push_back(static_cast<int>(i));
  return p;
}

Program parseFile(const std::string& path) { return parse(ir_text::readTextFile(path, "Kernel IR"), path); }

}  // namespace kiln::kernel
