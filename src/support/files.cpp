#include "kiln/support/files.h"

#include <ftw.h>
#include <stdio.h>

namespace kiln {

void removeTree(const std::string& path) {
  nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace kiln
