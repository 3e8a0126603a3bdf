// The tensors of a TorchScript archive checked against the records that hold their data. Sizes, strides, offsets and
// storage lengths all come from the pickles and may be damaged; LibTorch trusts them and reads past the memory it
// allocated. Two moments need a check:
// - before torch::jit::load, the tensor constants of the serialized code (constants.pkl, records constants/KEY): the
//   loader compiles the code and its constant pooling compares constant tensors element by element, so a constant whose
//   shape needs more elements than its storage holds was read out of bounds (a segfault, found by fuzz/pt_fuzzer.cpp);
// - after it, the module's parameters, buffers and other tensor attributes (data.pkl, records data/KEY), before
//   anything reads them (freeze_module did, on a storage an empty record left without memory).
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/support/checked_int.h"
#include "kiln/support/error.h"
#include "torch_util.h"

namespace kiln::frontend {
namespace {

// UserError unless tensor `t` (called `what`) lies inside a storage that has memory. `what` is already printable.
void checkInsideStorage(const std::string& path, const std::string& what, const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !t.has_storage()) return;
  // The last element's offset and the bytes up to its end, each step checked: a wrapped product or sum (a storage
  // offset of 3 * 2^61) would pass the comparison below and crash LibTorch's freezing.
  std::optional<int64_t> last = t.storage_offset();
  bool negative = *last < 0;
  for (int64_t d = 0; d < t.dim() && last; ++d) {
    negative = negative || t.stride(d) < 0;
    const std::optional<int64_t> step = checkedMul(t.size(d) - 1, t.stride(d));
    last = step ? checkedAdd(*last, *step) : std::nullopt;
  }
  const std::optional<int64_t> end = last ? checkedAdd(*last, 1) : std::nullopt;
  const std::optional<int64_t> needed = end ? checkedMul(*end, static_cast<int64_t>(t.element_size())) : std::nullopt;
  const int64_t held = static_cast<int64_t>(t.storage().nbytes());
  if (t.storage().data() == nullptr && held > 0)  // an empty record: LibTorch leaves the storage without memory
    userError("'{}' is damaged: {} ({} elements) has an empty data record; export the model again", path, what, t.numel());
  if (!needed)
    userError("'{}' is damaged: {} ({} elements) has a storage offset {} and strides that reach past any data record "
              "(their bytes overflow a 64-bit size); export the model again", path, what, t.numel(), t.storage_offset());
  if (negative || *needed > held)
    userError("'{}' is damaged: {} ({} elements) needs {} bytes of its data record, which holds {}; export the model "
              "again", path, what, t.numel(), *needed, held);
}

void forEachTensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& visit, int depth = 0) {
  if (depth > 64) return;  // constants nest a few levels at most; LibTorch refuses what it cannot type
  if (v.isTensor()) visit(v.toTensor());
  else if (v.isTuple())
    for (const auto& e : v.toTupleRef().elements()) forEachTensor(e, visit, depth + 1);
  else if (v.isList())
    for (const auto& e : v.toListRef()) forEachTensor(e, visit, depth + 1);
}

}  // namespace

void checkConstantRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* reader) {
  if (!reader) return;  // not a zip archive: LibTorch's loader says so, in the caller's words
  if (!reader->hasRecord("constants.pkl")) return;  // older archives keep constants elsewhere; LibTorch checks them
  c10::IValue constants;
  std::map<const void*, std::pair<std::string, int64_t>> records;  // the memory of each record read: its name, bytes
  try {
    auto [pickle, size] = reader->getRecord("constants.pkl");
    const char* bytes = static_cast<const char*>(pickle.get());
    size_t at = 0;
    auto read = [&](char* out, size_t n) {
      const size_t count = std::min(n, size - at);
      std::memcpy(out, bytes + at, count);
      at += count;
      return count;
    };
    auto readRecord = [&](const std::string& key) {
      const std::string name = "constants/" + key;
      auto [data, length] = reader->getRecord(name);
      records[data.get()] = {name, static_cast<int64_t>(length)};
      return std::move(data);
    };
    // The constants are tensors in tuples; a class type there has no compilation unit to resolve it yet.
    auto noClasses = [](const c10::QualifiedName& name) -> c10::StrongTypePtr {
      throw std::runtime_error("class " + name.qualifiedName() + " in constants.pkl");
    };
    ::torch::jit::Unpickler unpickler(read, noClasses, nullptr, readRecord, std::nullopt);
    constants = unpickler.parse_ivalue();
  } catch (const std::exception& e) {
    return;  // a record kiln cannot read this way (a class constant, a damaged pickle): LibTorch's loader reports it
  }
  int index = 0;
  forEachTensor(constants, [&](const at::Tensor& t) {
    const std::string what = fmt::format("constant tensor {} of the code", index++);
    checkInsideStorage(path, what, t);
    if (!t.has_storage() || t.storage().data() == nullptr) return;
    auto record = records.find(t.storage().data());
    const int64_t held = static_cast<int64_t>(t.storage().nbytes());
    if (record != records.end() && held > record->second.second)
      userError("'{}' is damaged: {} has a storage of {} bytes in a record ({}) of {}; export the model again", path,
                what, held, printable(record->second.first), record->second.second);
  });
}

void checkTensorRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* reader, const ::torch::jit::Module& m) {
  std::map<const c10::StorageImpl*, int64_t> storages;  // each distinct storage once (tied weights share one)
  for (const auto& a : m.named_attributes(/*recurse=*/true)) {
    if (!a.value.isTensor()) continue;
    const at::Tensor& t = a.value.toTensor();
    checkInsideStorage(path, fmt::format("tensor '{}'", printable(a.name)), t);
    if (t.defined() && t.numel() > 0 && t.has_storage())
      storages[t.storage().unsafeGetStorageImpl()] = static_cast<int64_t>(t.storage().nbytes());
  }
  // Each storage is one record ARCHIVE/data/KEY, its size the storage's: as multisets, the records' sizes and the
  // storages' (taken from the pickle) must agree, or some record is shorter or longer than the tensor it backs (a
  // record cannot be matched to its storage once loaded).
  std::vector<int64_t> records, held;
  if (!reader) userError("'{}' is not a readable TorchScript archive (not a zip archive)", path);
  try {
    for (const std::string& name : reader->getAllRecords())
      if (name.find("/data/") != std::string::npos || name.rfind("data/", 0) == 0)
        records.push_back(static_cast<int64_t>(reader->getRecordSize(name)));
  } catch (const std::exception& e) {
    userError("'{}' is not a readable TorchScript archive ({})", path, firstLine(e.what()));
  }
  for (const auto& [impl, bytes] : storages) held.push_back(bytes);
  std::sort(records.begin(), records.end());
  std::sort(held.begin(), held.end());
  if (records.size() == held.size() && records != held)
    userError("'{}' is damaged: its tensor data records hold {} bytes where its tensors' storages need {} (a record "
              "truncated or replaced); export the model again", path, std::accumulate(records.begin(), records.end(), int64_t{0}),
              std::accumulate(held.begin(), held.end(), int64_t{0}));
}

}  // namespace kiln::frontend
