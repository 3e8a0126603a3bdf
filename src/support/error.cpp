#include "kiln/support/error.h"

namespace kiln {

void internalError(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("internal error at {}:{}: {}", file, line, what));
}

std::string printableLines(const std::string& s) {
  std::string text;
  for (size_t from = 0; from <= s.size();) {
    const size_t nl = s.find('\n', from);
    text += printable(s.substr(from, nl == std::string::npos ? std::string::npos : nl - from));
    if (nl == std::string::npos) break;
    text += '\n';
    from = nl + 1;
  }
  return text;
}

std::string printable(const std::string& s) {
  std::string line;
  for (unsigned char c : s) line += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
  return line;
}

}  // namespace kiln
