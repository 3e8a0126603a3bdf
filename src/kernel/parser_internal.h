// The Kernel IR parser's shared pieces (kiln/kernel/parser.h): the text layer all IR parsers share
// (kiln/support/ir_text.h), and the per-kernel context that resolves the names the printer writes (index variables,
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
#include "kiln/support/ir_text.h"

namespace kiln::kernel::parse_detail {

using ir_text::Cursor;
using ir_text::Line;
using ir_text::LineReader;
using ir_text::parseDTypeWord;
using ir_text::parseIdx;

// What a kernel's statements refer to by name, and the index variables in scope where the parser stands.
struct KernelScope : ir_text::IdxNames {
  Kernel& kernel;
  std::vector<std::string> paramNames, sharedNames;
  std::map<std::string, int> floats, pairs;
  std::vector<std::pair<std::string, int>> vars;  // innermost last
  int nextVar = kBlockIdx + 1;

  explicit KernelScope(Kernel& k);
  int defineVar(const std::string& name);  // a fresh id for a definition, in scope from here on
  int var(Cursor& c, const std::string& name) const override;
  const std::vector<std::string>& indexSources() const override { return paramNames; }
  int floatSlot(Cursor& c);   // `%name`
  int pairReg(Cursor& c);     // `$name`
  int param(Cursor& c) { return c.oneOf(paramNames, "[", "kernel parameter"); }
  int shared(Cursor& c) { return c.oneOf(sharedNames, "[", "shared buffer"); }
};

FE parseFExpr(Cursor& c, KernelScope& scope);

Stmt parseStatement(Cursor& c, KernelScope& scope, LineReader& lines);
// The statements up to the `}` that closes the block (or the end of the kernel when `closed` is false).
Block parseBlock(LineReader& lines, KernelScope& scope, bool closed);

}  // namespace kiln::kernel::parse_detail
