// File helpers kiln uses instead of some std::filesystem calls. LibTorch's shared libraries export their own
// std::filesystem copies, which the dynamic linker may bind kiln's calls to; on some machines those crash
// (seen on the GPU machine with remove_all), so the calls kiln needs on error paths go through POSIX here.
#pragma once
#include <string>

namespace kiln {

// Removes a file or a directory tree; silently ignores what does not exist.
void removeTree(const std::string& path);

}  // namespace kiln
