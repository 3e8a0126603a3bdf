// Reading IR text back (the Loop, Tile and Kernel parsers): a cursor over one line that reports errors as
// `FILE:LINE:COL: what`, the input's lines, and the index expressions every level prints through IndexExpr's
// toString. Each level's parser resolves its own names (axes, buffers, parameters) through IdxNames.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/support/dtype.h"
#include "kiln/support/index_expr.h"

namespace kiln::ir_text {

bool wordChar(char ch);

// One line of the input and a position in it. Every read skips leading blanks first.
class Cursor {
 public:
  Cursor(const std::string& file, int line, std::string_view text) : file_(file), line_(line), text_(text) {}
  // A user error: `FILE:LINE:COL: what` at the current position (or at column `col`, 1-based, where given).
  [[noreturn]] void fail(const std::string& what, size_t col = 0) const;
  // fail("unexpected '...'") unless the line is used up.
  void expectEnd();
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
  // commas and brackets (`stacked(q_proj.weight, k_proj.weight)`), so they are matched whole, not lexed. With `what`
  // null, -1 where none matches; otherwise that is an error naming `what`.
  int oneOf(const std::vector<std::string>& names, std::string_view next, const char* what);
  // Everything left on the line, consumed.
  std::string takeRest();
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

struct Line {
  int number;
  std::string text;
};

// The input's lines (a trailing `\r` dropped); a parser takes them one by one.
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

// The names an index expression may use: variables (resolved by the level's scopes) and the buffers whose values
// are read as indices (`NAME[FLAT]`, IndexNode::Op::Load; its `buffer` is the position in indexSources()).
class IdxNames {
 public:
  virtual ~IdxNames() = default;
  virtual int var(Cursor& c, const std::string& name) const = 0;  // its id, or c.fail()
  virtual const std::vector<std::string>& indexSources() const = 0;
};

// An index expression as toString(e) printed it, rebuilt node for node without the constructors' folding (so that it
// prints back to the same text): `^ << >>` lowest with atom or parenthesized operands, then `+ -`, then `* floordiv mod`.
Idx parseIdx(Cursor& c, const IdxNames& names);
DType parseDTypeWord(Cursor& c);
// Reads a whole file (a UserError naming `what` if it cannot be read).
std::string readTextFile(const std::string& path, const char* what);

}  // namespace kiln::ir_text
