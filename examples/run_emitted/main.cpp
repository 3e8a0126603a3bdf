// Runs a directory written by `kiln compile MODEL.pt --emit cuda -o DIR` through kiln's installed runtime library:
// seeded inputs in (or those `kiln run --save-io IO` wrote), each output's checksum out.
//   usage: run_emitted DIR [SEED | IO]
#include <kiln/kiln_runtime.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

// f16 bits of |f| < 1 (truncated; values below f16's normal range become zero).
static uint16_t toHalf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint16_t sign = b >> 16 & 0x8000;
  int exponent = static_cast<int>(b >> 23 & 0xff) - 127 + 15;
  return exponent <= 0 ? sign : static_cast<uint16_t>(sign | exponent << 10 | (b >> 13 & 0x3ff));
}

// Seeded values: floats uniform in [-1, 1) (bf16: the f32's upper half), integers (token ids) in [0, 8).
static void fill(std::vector<unsigned char>& bytes, const std::string& dtype, uint64_t& state) {
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 40; };
  size_t width = dtype == "f32" ? 4 : dtype == "i64" ? 8 : dtype == "bool" ? 1 : 2;
  for (size_t i = 0; i + width <= bytes.size(); i += width) {
    float f = static_cast<float>(next()) / 8388608.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint16_t half = dtype == "bf16" ? static_cast<uint16_t>(bits >> 16) : toHalf(f);
    int64_t id = static_cast<int64_t>(next() % 8);
    unsigned char flag = id & 1;
    std::memcpy(&bytes[i], dtype == "f32" ? static_cast<void*>(&f) : dtype == "i64" ? static_cast<void*>(&id)
                           : dtype == "bool" ? static_cast<void*>(&flag) : static_cast<void*>(&half), width);
  }
}

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: %s DIR [SEED]\n", argv[0]); return 2; }
  try {
    kiln::ModelInfo info = kiln::describe(argv[1]);  // the manifest alone: no GPU needed
    std::printf("%s: %zu kernels for %s, %zu inputs, %zu outputs, %zu arena bytes (kiln %s; runtime %s)\n",
                info.model.c_str(), info.kernels, info.arch.c_str(), info.inputs.size(), info.outputs.size(),
                info.arenaBytes, info.kilnVersion.c_str(), kiln::version());
    kiln::Runtime runtime(argv[1]);
    std::string io = argc > 2 && !std::isdigit(static_cast<unsigned char>(argv[2][0])) ? argv[2] : "";
    uint64_t state = argc > 2 && io.empty() ? std::strtoull(argv[2], nullptr, 10) : 0;
    std::vector<std::vector<unsigned char>> in, out;
    kiln::NamedBuffers inputs, outputs;  // by name; a std::vector<kiln::Buffer> in info()'s order works as well
    for (const kiln::TensorInfo& t : info.inputs) {
      std::vector<unsigned char>& bytes = in.emplace_back(t.bytes);
      std::ifstream file(io + "/input" + std::to_string(in.size() - 1) + ".bin", std::ios::binary);
      if (io.empty()) fill(bytes, t.dtype, state);
      else if (!file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
        throw kiln::RuntimeError("cannot read " + std::to_string(t.bytes) + " bytes of input '" + t.name + "' from " + io,
                                 kiln::ErrorCode::InvalidArgument);
      inputs.push_back({t.name, kiln::Buffer::host(bytes.data(), bytes.size())});
    }
    for (const kiln::TensorInfo& t : info.outputs) {
      std::vector<unsigned char>& bytes = out.emplace_back(t.bytes);
      outputs.push_back({t.name, kiln::Buffer::host(bytes.data(), bytes.size())});
    }
    runtime.run(inputs, outputs);  // from a CUDA graph on the runtime's own stream; returns with the outputs written
    for (size_t o = 0; o < out.size(); ++o) {
      uint64_t sum = 14695981039346656037ull;  // FNV-1a over the output's bytes (kiln run prints the same)
      for (unsigned char b : out[o]) sum = (sum ^ b) * 1099511628211ull;
      std::printf("output %zu '%s' %s: %zu bytes, fnv1a %016llx\n", o, info.outputs[o].name.c_str(),
                  info.outputs[o].dtype.c_str(), out[o].size(), static_cast<unsigned long long>(sum));
    }
  } catch (const kiln::RuntimeError& e) {
    std::fprintf(stderr, "run_emitted: %s (%s)\n", e.what(), kiln::errorCodeName(e.code()));
    return 1;
  }
  return 0;
}
