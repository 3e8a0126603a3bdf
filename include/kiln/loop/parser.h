// Reads Loop IR text, as loop::print writes it (`kiln compile M --ir loop`), back into a Program: what `kiln opt
// --level loop` runs passes on. print(parse(print(p))) == print(p) for every Program the pipeline makes
// (tests/unit/loop_tile_parser_test.cpp). The Tile parser (kiln/tile/parser.h) reads the same buffers and kernel bodies
// around its schedules, and the Kernel parser the same buffer lines, through the pieces below.
//
// What the text leaves out and the parser makes up: axis variable ids (fresh ids in the order the axes are written),
// the values of weights (zeros of the buffer's shape: bind the real ones before interpreting), the inputs (the input
// buffers in order, as loop-lower-from-tensor makes them), and a kernel's row axes where it has no stages (0). Bad text
// is a UserError of one line, `FILE:LINE:COL: what is wrong`; the parser never asserts. It does not check what the
// verifier checks: run loop::verify on the result.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kiln/loop/ir.h"
#include "kiln/support/ir_text.h"

namespace kiln::loop {

// `file` names the text in error messages.
Program parse(const std::string& text, const std::string& file = "<loop IR>");
Program parseFile(const std::string& path);  // a UserError if the file cannot be read

// The pieces other levels' parsers share.
namespace parse_detail {
// `NAME : DTYPE[SHAPE] KIND ["WEIGHT"]` after the word `buffer`: NAME runs to the first ` : ` (names may hold blanks).
Buffer buffer(ir_text::Cursor& c);
// `NAME, NAME, ...` of the buffers, to the end of the line (`return`, `inputs`).
std::vector<int> bufferList(ir_text::Cursor& c, const std::vector<Buffer>& buffers);
// `NAME writes BUFFER  // ORIGIN; ORIGIN` after the word `kernel`.
Kernel kernelHeader(ir_text::Cursor& c, const std::vector<Buffer>& buffers);
// `ORIGIN; ORIGIN` (the rest of the line) as a kernel's origins.
std::vector<std::string> origins(ir_text::Cursor& c);
// The loop nest of kernel k as printKernelBody wrote it: the indented lines that follow, up to the first line that is
// not indented. Sets k's axes, row axes, stages, attention and result.
void kernelBody(ir_text::LineReader& lines, const std::vector<Buffer>& buffers, Kernel& k);
// The input buffers, in order (the inputs of a program whose text does not list them).
std::vector<int> inputBuffers(const std::vector<Buffer>& buffers);
// How a level above Loop IR writes a program around the Loop IR's lines (the Tile IR: a target line, a schedule after
// each kernel's header).
struct ProgramText {
  const char* header;                                          // the first line's prefix, before the model's name
  std::function<std::string(const std::string&)> modelName;    // the name from the rest of that line (default: all of it)
  std::function<bool(ir_text::Cursor&)> otherLine;             // a top-level line of another word: read, or false
  const char* otherWords = "";                                 // those words, for the error message ("'target', ")
  std::function<void(ir_text::LineReader&)> afterKernelHeader;  // the lines between a kernel's header and its loop nest
};
// The whole program: buffers, kernels, the return line, the inputs (inputBuffers).
void parseProgram(ir_text::LineReader& lines, const ProgramText& how, Program& p);
}  // namespace parse_detail

}  // namespace kiln::loop
