// The pickle records of a TorchScript archive (data.pkl, constants.pkl, code/*.debug_pkl) walked opcode by opcode before
// anything unpickles them. LibTorch's unpickler grows its memo table to whatever slot a PUT names: a damaged or hostile
// record naming slot 400 million made kiln's first unpickling allocate 6.6 GB, and the model then compiled (found from
// the fuzzer's out-of-memory inputs, docs/fuzzing.md). A pickler numbers its memo slots 0, 1, 2, ... as it stores them,
// so a PUT may name at most the next free slot; anything further is refused in one line before any memory is spent.
// The walk stops at the first opcode it does not know or an argument that runs past the record: LibTorch's own reader
// reports those.
#include <caffe2/serialize/inline_container.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

#include "kiln/support/error.h"
#include "torch_util.h"

namespace kiln::frontend {
namespace {

uint64_t littleEndian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bytes of the fixed-size argument of opcode `op`, -1 for a newline-terminated one, -2 for "length-prefixed" (the
// prefix's size in `prefix`), -4 for two newline-terminated lines, -3 for an opcode this walk does not know; 0 for none.
struct ArgumentShape {
  int kind = -3;
  int prefix = 0;
};

constexpr std::array<ArgumentShape, 256> argumentShapes() {
  std::array<ArgumentShape, 256> shapes{};
  auto set = [&shapes](std::initializer_list<unsigned char> ops, int kind, int prefix = 0) {
    for (unsigned char op : ops) shapes[op] = ArgumentShape{kind, prefix};
  };
  set({'K', 'q', 'h', 0x80, 0x82}, 1);        // BININT1 BINPUT BINGET PROTO EXT1
  set({'M', 0x83}, 2);                         // BININT2 EXT2
  set({'J', 'r', 'j', 0x84}, 4);               // BININT LONG_BINPUT LONG_BINGET EXT4
  set({'G', 0x95}, 8);                         // BINFLOAT FRAME
  set({'U', 0x8c, 'C', 0x8a}, -2, 1);          // SHORT_BINSTRING SHORT_BINUNICODE SHORT_BINBYTES LONG1
  set({'T', 'X', 'B', 0x8b}, -2, 4);           // BINSTRING BINUNICODE BINBYTES LONG4
  set({0x8d, 0x8e, 0x96}, -2, 8);              // BINUNICODE8 BINBYTES8 BYTEARRAY8
  set({'I', 'L', 'F', 'S', 'V', 'P', 'p', 'g'}, -1);
  set({'c', 'i'}, -4);                         // GLOBAL, INST: two newline-terminated lines
  set({'(', ')', ']', '}', 'N', 0x88, 0x89, 't', 0x85, 0x86, 0x87, 'a', 'e', 'u', 's', 'R', 'b', '.', '0', '1', '2', 'Q',
       0x81, 0x92, 0x93, 0x94, 'o', 'l', 'd', 0x8f, 0x90, 0x91, 0x97, 0x98},
      0);
  return shapes;
}

constexpr std::array<ArgumentShape, 256> kArgumentShapes = argumentShapes();

int argumentKind(unsigned char op, int* prefix) {
  const ArgumentShape& shape = kArgumentShapes[op];
  if (shape.kind == -2) *prefix = shape.prefix;
  return shape.kind;
}

// The memo slot a PUT beyond the next free one names, or -1 when every PUT of the pickle is in order.
int64_t memoOverreach(const unsigned char* p, size_t size, uint64_t* nextFree) {
  uint64_t next = 0;  // the slot the pickler would store next
  size_t at = 0;
  while (at < size) {
    const unsigned char op = p[at++];
    int prefix = 0;
    const int kind = argumentKind(op, &prefix);
    if (kind == -3) break;
    if (kind == 0) {
      if (op == 0x94) ++next;  // MEMOIZE stores in the next slot
      if (op == '.') break;
      continue;
    }
    if (kind == -1 || kind == -4) {
      for (int lines = kind == -4 ? 2 : 1; lines > 0; --lines) {
        const void* nl = at < size ? std::memchr(p + at, '\n', size - at) : nullptr;
        if (!nl) return -1;
        const size_t end = static_cast<size_t>(static_cast<const unsigned char*>(nl) - p);
        if (op == 'p') {  // PUT: the slot in decimal
          uint64_t slot = 0;
          for (size_t i = at; i < end && slot < (uint64_t{1} << 40); ++i)
            if (p[i] >= '0' && p[i] <= '9') slot = slot * 10 + (p[i] - '0');
          if (slot > next) { *nextFree = next; return static_cast<int64_t>(slot); }
          next = std::max(next, slot + 1);
        }
        at = end + 1;
      }
      continue;
    }
    if (kind == -2) {
      if (at + static_cast<size_t>(prefix) > size) return -1;
      const uint64_t length = littleEndian(p + at, prefix);
      at += static_cast<size_t>(prefix);
      if (length > size - at) return -1;
      at += static_cast<size_t>(length);
      continue;
    }
    if (at + static_cast<size_t>(kind) > size) return -1;
    if (op == 'q' || op == 'r') {  // BINPUT, LONG_BINPUT
      const uint64_t slot = littleEndian(p + at, kind);
      if (slot > next) { *nextFree = next; return static_cast<int64_t>(slot); }
      next = std::max(next, slot + 1);
    }
    at += static_cast<size_t>(kind);
  }
  return -1;
}

}  // namespace

std::unique_ptr<caffe2::serialize::PyTorchStreamReader> openArchive(const std::string& path) {
  try {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception&) {
    return nullptr;
  }
}

void checkPickleRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* reader) {
  if (!reader) return;  // not a zip archive: LibTorch's loader says so, in the caller's words
  std::vector<std::string> names;
  try {
    names = reader->getAllRecords();
  } catch (const std::exception&) {
    return;
  }
  for (const std::string& name : names) {
    const bool pickle = (name.size() > 4 && name.compare(name.size() - 4, 4, ".pkl") == 0) ||
                        (name.size() > 10 && name.compare(name.size() - 10, 10, ".debug_pkl") == 0);
    if (!pickle) continue;
    at::DataPtr data;
    size_t size = 0;
    try {
      std::tie(data, size) = reader->getRecord(name);
    } catch (const std::exception&) {
      continue;  // LibTorch's loader reports a record it cannot read
    }
    uint64_t next = 0;
    if (int64_t slot = memoOverreach(static_cast<const unsigned char*>(data.get()), size, &next); slot >= 0)
      userError("'{}' is damaged: its record {} stores into pickle memo slot {} where the next is {}; export the model again",
                path, printable(name), slot, next);
  }
}

}  // namespace kiln::frontend
