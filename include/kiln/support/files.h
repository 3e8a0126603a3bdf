// File helpers kiln uses instead of some std::filesystem calls. LibTorch's shared libraries export their own
// std::filesystem copies, which the dynamic linker may bind kiln's calls to; on some machines those crash
// (seen on the GPU machine with remove_all), so the calls kiln needs on error paths go through POSIX here.
#pragma once
#include <string>

namespace kiln {

// Removes a file or a directory tree; silently ignores what does not exist.
void removeTree(const std::string& path);

// Why `path` is not a file kiln can read without blocking: "" for a regular file (or a symlink to one) and for a path
// that does not exist (opening it then says so); otherwise what it is: "a FIFO", "a directory", "a device", "a socket".
// It asks stat(), which never blocks: reading a FIFO put where kiln expects a file (a manifest, a cubin, a
// --product-shapes table) hung kiln for good (issue 45).
std::string notARegularFile(const std::string& path);

}  // namespace kiln
