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
  LineReader lines(file, text);
  Program p;
  loop::parse_detail::ProgramText how{"// kiln tile IR:"};
  how.modelName = [](const std::string& rest) { return rest.substr(0, rest.rfind(" (target ")); };
  how.otherLine = [&p](Cursor& c) { return c.acceptWord("target") && (p.target = parseTarget(c), true); };
  how.otherWords = "'target', ";
  how.afterKernelHeader = [&p](LineReader& l) { p.schedules.push_back(scheduleLines(l)); };
  loop::parse_detail::parseProgram(lines, how, p.loop);
  return p;
}

Program parseFile(const std::string& path) { return parse(ir_text::readTextFile(path, "Tile IR"), path); }

}  // namespace kiln::tile
