// Naming what a mistyped name was meant to be: a command, a pass.
#pragma once
#include <string>
#include <vector>

namespace kiln {

// Levenshtein distance: the fewest single-character insertions, deletions and substitutions that turn a into b.
size_t editDistance(const std::string& a, const std::string& b);

// The at most `count` names of `candidates` nearest to `given` by edit distance, nearest first (ties in the candidates'
// order).
std::vector<std::string> nearestNames(const std::string& given, const std::vector<std::string>& candidates, size_t count);

}  // namespace kiln
