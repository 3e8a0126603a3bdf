// libFuzzer target for the runtime's manifest reader (issue 14 item 7): any bytes as DIR/manifest.json. The only
// acceptable outcomes are a Manifest or a kiln::UserError with a one-line message; anything else (another exception,
// a crash, a sanitizer report, a hang) is a bug the fuzzer reports. Built and run by tests/fuzz_manifest.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // readManifest reports malformed JSON itself; the fields are what is fuzzed here
  try {
    kiln::runtime::Manifest m = kiln::runtime::manifestFromJson(j, "fuzz/manifest.json");
    (void)kiln::runtime::toJson(m).dump();  // what was accepted can be written back
  } catch (const kiln::UserError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) {
      std::fprintf(stderr, "manifest error of more than one line:\n%s\n", what.c_str());
      std::abort();
    }
  }
  return 0;
}
