// Reads Tile IR text, as tile::print writes it (`kiln compile M --ir tile`), back into a Program: what `kiln opt
// --level tile` runs passes on and what a per-pass test (tests/passes/tile/) writes. print(parse(print(p))) == print(p)
// for every Program the pipeline makes (tests/unit/loop_tile_parser_test.cpp).
//
// The text is the Loop IR program (kiln/loop/parser.h says what it leaves out) with a `target ARCH [sms N]` line and,
// after each kernel's header, its schedule as one line of typed fields:
//
//   schedule tiled_contraction m_axis=1 n_axis=2 tile_m=128 tile_n=64 tile_k=64 instruction=wgmma.m64nNk16 ...
//
// Every field that differs from the strategy's default (the struct's initializers in kiln/tile/ir.h) is written as
// KEY=VALUE under toJson's key, in one fixed order; a missing field reads as its default. The line after it, a comment,
// is describe(): what follows from the schedule (grid, threads, shared bytes), printed for the reader and not read
// back. Not in the text: --product-shapes tables (Program::productShapes).
#pragma once
#include <string>

#include "kiln/support/ir_text.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

// `file` names the text in error messages.
Program parse(const std::string& text, const std::string& file = "<tile IR>");
Program parseFile(const std::string& path);  // a UserError if the file cannot be read

// `ARCH [sms N]` after the word `target` (the Kernel IR's target line too): the arch's Target, with N SMs where given.
Target parseTarget(ir_text::Cursor& c);
// The schedule line's fields after `schedule ` (the strategy name, then KEY=VALUE of every non-default field).
std::string scheduleFields(const Schedule& s);
// Reads what scheduleFields wrote; the cursor stands after `schedule`.
Schedule parseSchedule(ir_text::Cursor& c);

}  // namespace kiln::tile
