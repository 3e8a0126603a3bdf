// One updating status line on stderr while kiln works (DESIGN.md §3.7's debugging vocabulary stays the place for
// detail): which pass is running, and while nvcc works, kernels compiled out of the total and the time so far. It is
// shown only when stderr is a terminal and neither -v nor KILN_PROGRESS=0 asks otherwise, so logs, pipes and CI see
// nothing of it. Thread-safe: nvcc's workers report from their own threads.
#pragma once
#include <string>

namespace kiln::progress {

// Whether the line is shown: stderr is a terminal and KILN_PROGRESS is not "0".
bool enabled();
// Turns the line off for this process (kiln -v: its log lines say the same and must not be overwritten).
void disable();
// Replaces the line with `text` (cut to the terminal's width); nothing when not enabled.
void show(const std::string& text);
// Erases the line, so that what is printed next starts on a clean line; nothing when none is shown.
void clear();

}  // namespace kiln::progress
