// Reads Kernel IR text, as kernel::print writes it (`kiln compile M --ir kernel`), back into a Program: what `kiln opt`
// runs passes on and what a per-pass test (tests/passes/kernel/) writes by hand. print(parse(print(p))) == print(p) for
// every Program the pipeline makes (tests/unit/kernel_parser_test.cpp).
//
// What the text leaves out and the parser makes up: index variable ids (each definition gets a fresh one; names are
// resolved innermost first, as the printer's scopes nest), parameters' buffer ids (a parameter is named after its
// buffer), and the values of weights (a weight buffer gets its name and zeros of its shape: bind the real ones before
// interpreting). Derived figures (a kernel's static shared bytes, a dynamic buffer's offset) are printed for the
// reader and not read back. The Target is read by its arch (`target sm_90a`): one whose figures a test changed reads
// back as the arch's own. Without a `target` line the Program is for the default Target; without an `inputs` line its
// inputs are its input buffers in order.
//
// Bad text is a UserError of one line, `FILE:LINE:COL: what is wrong`; the parser never asserts. It does not check
// what the verifier checks (counts, bounds, hardware rules): run kernel::verify on the result.
#pragma once
#include <string>

#include "kiln/kernel/ir.h"

namespace kiln::kernel {

// `file` names the text in error messages.
Program parse(const std::string& text, const std::string& file = "<kernel IR>");
// Reads the file (a UserError if it cannot be read) and parses it.
Program parseFile(const std::string& path);

}  // namespace kiln::kernel
