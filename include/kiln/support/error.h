// kiln's two error channels (DESIGN.md §3.6).
//
//  * UserError: the model, an option or the environment is wrong. One line that names the object, where
//    it is (source file:line when known) and how to fix it. The driver prints it and exits with code 1
//    (UsageError: 2).
//  * InternalError: kiln itself is wrong (a broken invariant). Thrown by KILN_ASSERT; the pass manager adds
//    the failing pass's name and writes the IR it failed on next to the message.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace kiln {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct UsageError : UserError {
  using UserError::UserError;
};

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void userError(fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void usageError(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void internalError(const char* file, int line, const std::string& what);

// Text from a user's file (names in a manifest, record names in a .pt) as a one-line message may quote it: control
// bytes (a newline, say) shown as \xHH.
std::string printable(const std::string& s);
// The same for text of several lines (a report): control bytes but the newlines shown as \xHH.
std::string printableLines(const std::string& s);

}  // namespace kiln

#define KILN_ASSERT(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond)) ::kiln::internalError(__FILE__, __LINE__, std::string(#cond ": ") + fmt::format(__VA_ARGS__)); \
  } while (0)
