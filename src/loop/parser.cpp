// Loop IR parser: the program around the kernels (buffers, kernel headers, `return`); parser_body.cpp reads the loop
// nests. See kiln/loop/parser.h.
#include "kiln/loop/parser.h"

#include <fmt/format.h>

#include "kiln/support/error.h"

namespace kiln::loop {
namespace parse_detail {

using ir_text::Cursor;

namespace {

Buffer::Kind bufferKind(Cursor& c) {
  size_t col = c.here();
  std::string w = c.word();
  for (auto k : {Buffer::Kind::Input, Buffer::Kind::Weight, Buffer::Kind::Temp, Buffer::Kind::Output, Buffer::Kind::Counters})
    if (w == bufferKindName(k)) return k;
  c.fail(fmt::format("unknown buffer kind '{}' (input, weight, temp, output or counters)", w), col);
}

std::vector<std::string> bufferNames(const std::vector<Buffer>& buffers) {
  std::vector<std::string> names;
  for (auto& b : buffers) names.push_back(b.name);
  return names;
}

}  // namespace

Buffer buffer(Cursor& c) {
  Buffer b;
  c.skipBlanks();
  std::string_view rest = c.rest();
  size_t colon = rest.find(" : ");
  if (colon == std::string_view::npos || colon == 0) c.fail("expected 'buffer NAME : DTYPE[SHAPE] KIND'");
  b.name = std::string(rest.substr(0, colon));
  c.accept(b.name);
  c.expect(":");
  b.dtype = ir_text::parseDTypeWord(c);
  c.expect("[");
  if (!c.accept("scalar")) {
    do b.shape.push_back(c.integer());
    while (c.accept("x"));
  }
  c.expect("]");
  b.kind = bufferKind(c);
  if (c.accept("\"")) {
    std::string_view r = c.rest();
    size_t end = r.rfind('"');
    if (end == std::string_view::npos) c.fail("a weight's name is not closed by '\"'");
    auto w = std::make_shared<torch::WeightData>();
    w->name = std::string(r.substr(0, end));
    w->values.assign(static_cast<size_t>(numel(b.shape)), 0.f);  // the text names a weight, it holds no values
    b.weight = std::move(w);
    c.accept(std::string(r.substr(0, end + 1)));
  }
  return b;
}

std::vector<int> bufferList(Cursor& c, const std::vector<Buffer>& buffers) {
  std::vector<int> ids;
  auto names = bufferNames(buffers);
  if (c.atEnd()) return ids;
  do ids.push_back(c.oneOf(names, "", "buffer"));
  while (c.accept(","));
  return ids;
}

std::vector<std::string> origins(Cursor& c) {
  std::vector<std::string> out;
  std::string text = c.takeRest();
  if (text.empty()) return out;
  for (size_t from = 0;;) {
    size_t sep = text.find("; ", from);
    out.push_back(text.substr(from, sep == std::string::npos ? std::string::npos : sep - from));
    if (sep == std::string::npos) return out;
    from = sep + 2;
  }
}

Kernel kernelHeader(Cursor& c, const std::vector<Buffer>& buffers) {
  Kernel k;
  k.name = c.word();
  c.expect("writes");
  auto names = bufferNames(buffers);
  k.output = c.oneOf(names, "  //", "buffer");
  c.expect("//");
  k.origins = origins(c);
  return k;
}

std::vector<int> inputBuffers(const std::vector<Buffer>& buffers) {
  std::vector<int> ids;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].kind == Buffer::Kind::Input) ids.push_back(static_cast<int>(i));
  return ids;
}

void parseProgram(ir_text::LineReader& lines, const ProgramText& how, Program& p) {
  bool returned = false;
  while (!lines.done()) {
    const ir_text::Line& line = lines.take();
    Cursor c(lines.file(), line.number, line.text);
    if (c.atEnd()) continue;
    if (c.accept(how.header)) {
      p.modelName = c.takeRest();
      if (how.modelName) p.modelName = how.modelName(p.modelName);
      continue;
    }
    if (c.startsWith("//")) continue;
    if (returned) c.fail("nothing may follow the 'return' line");
    if (line.text[0] == ' ') c.fail("an indented line outside a kernel");
    if (c.acceptWord("buffer")) {
      p.buffers.push_back(buffer(c));
    } else if (c.acceptWord("kernel")) {
      p.kernels.push_back(kernelHeader(c, p.buffers));
      if (how.afterKernelHeader) how.afterKernelHeader(lines);
      kernelBody(lines, p.buffers, p.kernels.back());
    } else if (c.acceptWord("return")) {
      p.outputs = bufferList(c, p.buffers);
      returned = true;
    } else if (!how.otherLine || !how.otherLine(c)) {
      c.fail(fmt::format("expected {}'buffer', 'kernel' or 'return'", how.otherWords));
    }
    c.expectEnd();
  }
  if (!returned) Cursor(lines.file(), lines.lastLine(), "").fail("the program ends without its 'return' line");
  p.inputs = inputBuffers(p.buffers);
}

}  // namespace parse_detail

Program parse(const std::string& text, const std::string& file) {
  ir_text::LineReader lines(file, text);
  Program p;
  parse_detail::parseProgram(lines, {"// kiln loop IR:"}, p);
  return p;
}

Program parseFile(const std::string& path) { return parse(ir_text::readTextFile(path, "Loop IR"), path); }

}  // namespace kiln::loop
