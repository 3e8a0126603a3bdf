// Running another program (nvcc, python3) from an argument vector: no shell ever parses a file name or an argument,
// so nothing in them can run a command.
#pragma once
#include <string>
#include <vector>

namespace kiln {

struct ProcessResult {
  std::string output;  // what it wrote to stdout and stderr, interleaved
  int exitStatus = 0;  // its exit status; 128 + the signal's number when a signal ended it
};

// Runs args[0] (an absolute path, or a name looked up on PATH) with args[1..] in directory `dir` (empty: this
// process's), stdin from /dev/null. Throws UserError "cannot run NAME (...); HINT" where it cannot be started.
ProcessResult runProgram(const std::vector<std::string>& args, const std::string& dir, const std::string& hint);

}  // namespace kiln
