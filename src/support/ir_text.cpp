// The IR parsers' shared text layer (kiln/support/ir_text.h).
#include "kiln/support/ir_text.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kiln/support/error.h"

namespace kiln::ir_text {
namespace {

Idx node(IndexNode::Op op, Idx a, Idx b) {
  auto n = std::make_shared<IndexNode>();
  n->op = op;
  n->a = std::move(a);
  n->b = std::move(b);
  return n;
}

Idx constant(int64_t v) {
  auto n = std::make_shared<IndexNode>();
  n->op = IndexNode::Op::Const;
  n->value = v;
  return n;
}

}  // namespace

bool wordChar(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

void Cursor::fail(const std::string& what, size_t col) const {
  throw UserError(fmt::format("{}:{}:{}: {}", file_, line_, col ? col : pos_ + 1, what));
}

void Cursor::skipBlanks() {
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
}

bool Cursor::atEnd() {
  skipBlanks();
  return pos_ >= text_.size();
}

bool Cursor::startsWith(std::string_view literal) {
  skipBlanks();
  return text_.substr(pos_).substr(0, literal.size()) == literal;
}

bool Cursor::accept(std::string_view literal) {
  if (!startsWith(literal)) return false;
  pos_ += literal.size();
  return true;
}

bool Cursor::acceptWord(std::string_view w) {
  if (!startsWith(w)) return false;
  size_t end = pos_ + w.size();
  if (end < text_.size() && wordChar(text_[end])) return false;
  pos_ = end;
  return true;
}

void Cursor::expect(std::string_view literal) {
  if (accept(literal)) return;
  std::string_view found = rest().substr(0, 24);
  fail(fmt::format("expected '{}', found '{}'", literal, found.empty() ? "end of line" : printable(std::string(found))));
}

int64_t Cursor::integer() {
  skipBlanks();
  size_t start = pos_;
  if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
  size_t digits = pos_;
  while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  if (pos_ == digits) {
    pos_ = start;
    fail("expected an integer");
  }
  try {
    return std::stoll(std::string(text_.substr(start, pos_ - start)));
  } catch (const std::out_of_range&) {
    fail("integer out of range", start + 1);
  }
}

float Cursor::number() {
  skipBlanks();
  std::string s(text_.substr(pos_, 64));
  char* end = nullptr;
  float v = std::strtof(s.c_str(), &end);
  if (end == s.c_str()) fail("expected a number");
  pos_ += static_cast<size_t>(end - s.c_str());
  return v;
}

std::string Cursor::word() {
  skipBlanks();
  size_t start = pos_;
  while (pos_ < text_.size() &&
         (wordChar(text_[pos_]) || (text_[pos_] == '.' && pos_ > start && pos_ + 1 < text_.size() && wordChar(text_[pos_ + 1]))))
    ++pos_;
  if (pos_ == start) fail("expected a name");
  return std::string(text_.substr(start, pos_ - start));
}

int Cursor::oneOf(const std::vector<std::string>& names, std::string_view next, const char* what) {
  skipBlanks();
  int best = -1;
  std::string_view r = rest();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (r.substr(0, n.size()) == n && r.substr(n.size(), next.size()) == next &&
        (best < 0 || n.size() > names[static_cast<size_t>(best)].size()))
      best = static_cast<int>(i);
  }
  if (best < 0) {
    if (!what) return -1;
    fail(fmt::format("unknown {} at '{}'", what, printable(std::string(r.substr(0, 24)))));
  }
  pos_ += names[static_cast<size_t>(best)].size();
  return best;
}

void Cursor::expectEnd() {
  if (!atEnd()) fail(fmt::format("unexpected '{}'", printable(std::string(rest().substr(0, 24)))));
}

std::string Cursor::takeRest() {
  skipBlanks();
  std::string r(rest());
  pos_ = text_.size();
  return r;
}

LineReader::LineReader(const std::string& file, const std::string& text) : file_(file) {
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines_.push_back({number, line});
  }
}

DType parseDTypeWord(Cursor& c) {
  size_t col = c.here();
  std::string w = c.word();
  auto t = parseDType(w);
  if (!t) c.fail(fmt::format("unknown dtype '{}'", w), col);
  return *t;
}

namespace {

Idx bitExpr(Cursor& c, const IdxNames& s);

Idx factor(Cursor& c, const IdxNames& s) {
  c.skipBlanks();
  if (c.accept("(")) {
    Idx e = bitExpr(c, s);
    c.expect(")");
    return e;
  }
  for (auto [word, op] : {std::pair{"min(", IndexNode::Op::Min}, std::pair{"max(", IndexNode::Op::Max}}) {
    if (!c.accept(word)) continue;
    Idx a = bitExpr(c, s);
    c.expect(",");
    Idx b = bitExpr(c, s);
    c.expect(")");
    return node(op, a, b);
  }
  char ch = c.rest().empty() ? '\0' : c.rest()[0];
  if (ch == '-' || std::isdigit(static_cast<unsigned char>(ch))) return constant(c.integer());
  if (int source = c.oneOf(s.indexSources(), "[", nullptr); source >= 0) {  // an index read from memory
    c.expect("[");
    auto n = std::make_shared<IndexNode>();
    n->op = IndexNode::Op::Load;
    n->buffer = source;
    n->name = s.indexSources()[static_cast<size_t>(source)];
    n->a = bitExpr(c, s);
    c.expect("]");
    return n;
  }
  if (!wordChar(ch)) c.fail("expected an index expression");
  std::string name = c.word();
  auto n = std::make_shared<IndexNode>();
  n->op = IndexNode::Op::Var;
  n->var = s.var(c, name);
  n->name = name;
  return n;
}

Idx term(Cursor& c, const IdxNames& s) {
  Idx e = factor(c, s);
  for (;;) {
    if (c.accept("*")) e = node(IndexNode::Op::Mul, e, factor(c, s));
    else if (c.acceptWord("floordiv")) e = node(IndexNode::Op::FloorDiv, e, factor(c, s));
    else if (c.acceptWord("mod")) e = node(IndexNode::Op::Mod, e, factor(c, s));
    else return e;
  }
}

Idx sum(Cursor& c, const IdxNames& s) {
  Idx e = term(c, s);
  for (;;) {
    if (c.accept("+")) e = node(IndexNode::Op::Add, e, term(c, s));
    else if (c.accept("- ")) e = node(IndexNode::Op::Add, e, constant(-c.integer()));  // toString's `a - k`
    else return e;
  }
}

Idx bitExpr(Cursor& c, const IdxNames& s) {
  Idx e = sum(c, s);
  for (;;) {
    if (c.accept("^")) e = node(IndexNode::Op::Xor, e, sum(c, s));
    else if (c.accept("<<")) e = node(IndexNode::Op::Shl, e, sum(c, s));
    else if (c.accept(">>")) e = node(IndexNode::Op::Shr, e, sum(c, s));
    else return e;
  }
}

}  // namespace

Idx parseIdx(Cursor& c, const IdxNames& names) { return bitExpr(c, names); }

std::string readTextFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) userError("cannot read {} file '{}'", what, printable(path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace kiln::ir_text
