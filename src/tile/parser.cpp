// Tile IR parser: the Loop IR program with its target and a schedule line per kernel (kiln/tile/parser.h).
#include "kiln/tile/parser.h"

#include <fmt/format.h>

#include "kiln/loop/parser.h"
#include "kiln/support/error.h"

namespace kiln::tile {

using ir_text::Cursor;
using ir_text::LineReader;

Target parseTarget(Cursor& c) {
  size_t col = c.here();
  std::string arch = c.word();
  Target t = defaultTarget();
  try {
    t = targetFor(arch);
  } catch (const UserError&) {
    c.fail(fmt::format("unknown target '{}' (known: {})", arch, knownArchList()), col);
  }
  if (c.acceptWord("sms")) {
    col = c.here();
    t.smCount = c.integer();
    if (t.smCount < 1) c.fail("a target has at least one SM", col);
  }
  return t;
}

namespace {

// `  schedule STRATEGY FIELDS`, then the comment lines after it (describe(), derived).
Schedule scheduleLines(LineReader& lines) {
  if (lines.done() || lines.peek().text.rfind("  schedule ", 0) != 0) {
    int at = lines.done() ? lines.lastLine() : lines.peek().number;
    Cursor(lines.file(), at, "").fail("a kernel's header is followed by its 'schedule' line");
  }
  const ir_text::Line& line = lines.take();
  Cursor c(lines.file(), line.number, line.text);
  c.expect("schedule");
  Schedule s = parseSchedule(c);
  while (!lines.done()) {
    Cursor comment(lines.file(), lines.peek().number, lines.peek().text);
    if (lines.peek().text.rfind("  ", 0) != 0 || !comment.startsWith("//")) break;
    lines.take();
  }
  return s;
}

}  // namespace

Program parse(const std::string& text, const std::string& file) {
  using namespace loop::parse_detail;
  LineReader lines(file, text);
  Program p;
  bool returned = false;
  while (!lines.done()) {
    const ir_text::Line& line = lines.take();
    Cursor c(file, line.number, line.text);
    if (c.atEnd()) continue;
    if (c.accept("// kiln tile IR:")) {
      std::string name = c.takeRest();
      p.loop.modelName = name.substr(0, name.rfind(" (target "));
      continue;
    }
    if (c.startsWith("//")) continue;
    if (returned) c.fail("nothing may follow the 'return' line");
    if (line.text[0] == ' ') c.fail("an indented line outside a kernel");
    if (c.acceptWord("target")) {
      p.target = parseTarget(c);
    } else if (c.acceptWord("buffer")) {
      p.loop.buffers.push_back(buffer(c));
    } else if (c.acceptWord("kernel")) {
      p.loop.kernels.push_back(kernelHeader(c, p.loop.buffers));
      p.schedules.push_back(scheduleLines(lines));
      kernelBody(lines, p.loop.buffers, p.loop.kernels.back());
    } else if (c.acceptWord("return")) {
      p.loop.outputs = bufferList(c, p.loop.buffers);
      returned = true;
    } else {
      c.fail("expected 'target', 'buffer', 'kernel' or 'return'");
    }
    c.expectEnd();
  }
  if (!returned) Cursor(file, lines.lastLine(), "").fail("the program ends without its 'return' line");
  p.loop.inputs = inputBuffers(p.loop.buffers);
  return p;
}

Program parseFile(const std::string& path) { return parse(ir_text::readTextFile(path, "Tile IR"), path); }

}  // namespace kiln::tile
