// The Kernel IR parser's shared pieces (kiln/kernel/parser.h): a cursor over one line of text that reports errors as
// `FILE:LINE:COL: what`, and the per-kernel context that resolves the names the printer writes (index variables,
// float slots, pair registers, parameters, shared buffers) back to the ids a Program holds. Split by concern:
// parser_expr.cpp reads index and float expressions, parser_stmt.cpp statements, parser.cpp the program around them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/kernel/ir.h"

namespace kiln::kernel::parse_detail {

// One line of the input and a position in it. Every read skips leading blanks first.
class Cursor {
 public:
  Cursor(const std::string& file, int line, std::string_view text) : file_(file), line_(line), text_(text) {}
  // A user error: `FILE:LINE:COL: what` at the current position (or at column `col`, 1-based, where given).
  [[noreturn]] void fail(const std::string& what, size_t col = 0) const;
  void skipBlanks();
  bool atEnd();
  // The literal at the current position: consumed and true, or nothing consumed and false.
  bool accept(std::string_view literal);
  // accept(), but the literal must be followed by a character that cannot continue a word.
  bool acceptWord(std::string_view word);
  void expect(std::string_view literal);
  bool startsWith(std::string_view literal);
  int64_t integer();
  float number();  // a float as fmt prints it: 1.5, -3, 1e-05, inf, -inf, nan
  // A name of letters, digits, `_` and inner dots (`threadIdx.x`; `k..n` stops before the dots).
  std::string word();
  // The longest of `names` written at the current position and followed by `next`; its index. Names may hold blanks,
  // commas and brackets (`stacked(q_proj.weight, k_proj.weight)`), so they are matched whole, not lexed.
  int oneOf(const std::vector<std::string>& names, std::string_view next, const char* what);
  std::string_view rest() const { return text_.substr(pos_); }
  size_t column() const { return pos_ + 1; }
  size_t here() {  // the column of what the next read will see
    skipBlanks();
    return column();
  }
  int line() const { return line_; }
  const std::string& file() const { return file_; }

 private:
  const std::string& file_;
  int line_;
  std::string_view text_;
  size_t pos_ = 0;
};

// What a kernel's statements refer to by name, and the index variables in scope where the parser stands.
struct KernelScope {
  Kernel& kernel;
  std::vector<std::string> paramNames, sharedNames;
  std::map<std::string, int> floats, pairs;
  std::vector<std::pair<std::string, int>> vars;  // innermost last
  int nextVar = kBlockIdx + 1;

  explicit KernelScope(Kernel& k);
  int defineVar(const std::string& name);  // a fresh id for a definition, in scope from here on
  int var(Cursor& c, const std::string& name) const;
  int floatSlot(Cursor& c);   // `%name`
  int pairReg(Cursor& c);     // `$name`
  int param(Cursor& c) { return c.oneOf(paramNames, "[", "kernel parameter"); }
  int shared(Cursor& c) { return c.oneOf(sharedNames, "[", "shared buffer"); }
};

Idx parseIdx(Cursor& c, const KernelScope& scope);
FE parseFExpr(Cursor& c, KernelScope& scope);
DType parseDTypeWord(Cursor& c);

// One statement line (not `}`); For and If lines (ending in `{`) take their body from the following lines.
struct Line {
  int number;
  std::string text;
};
class LineReader;
Stmt parseStatement(Cursor& c, KernelScope& scope, LineReader& lines);
// The statements up to the `}` that closes the block (or the end of the kernel when `closed` is false).
Block parseBlock(LineReader& lines, KernelScope& scope, bool closed);

// The input's lines; a kernel's body runs until a line that is not indented.
class LineReader {
 public:
  LineReader(const std::string& file, const std::string& text);
  bool done() const { return next_ >= lines_.size(); }
  const Line& peek() const { return lines_[next_]; }
  const Line& take() { return lines_[next_++]; }
  const std::string& file() const { return file_; }
  int lastLine() const { return lines_.empty() ? 1 : lines_.back().number; }

 private:
  std::string file_;
  std::vector<Line> lines_;
  size_t next_ = 0;
};

}  // namespace kiln::kernel::parse_detail
