#include "kiln/support/error.h"

namespace kiln {

void internalError(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("internal error at {}:{}: {}", file, line, what));
}

std::string printable(const std::string& s) {
  std::string line;
  for (unsigned char c : s) line += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
  return line;
}

}  // namespace kiln
