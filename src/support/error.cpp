#include "kiln/support/error.h"

namespace kiln {

void internalError(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("internal error at {}:{}: {}", file, line, what));
}

}  // namespace kiln
