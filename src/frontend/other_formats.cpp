// Files PyTorch writes that kiln does not read, named as what they are (issue 44): LibTorch's loader would say only
// that a record (constants.pkl) is missing, or that the file is not a zip archive. (torch.export.save's archives, whose
// records include `archive_format`, are read: exported_program.h.)
//   torch.save of a state_dict or of a module (zip format): `data.pkl` with no `code/` and no `constants.pkl`
//   torch.save's legacy format, or pickle.dump: not a zip, the first byte a pickle protocol mark (0x80)
#include <fstream>

#include "kiln/support/error.h"
#include "torch_util.h"

namespace kiln::frontend {
namespace {

// Whether record `name` is `what` at the archive's root (LibTorch's names may keep the archive's folder: "m/what").
bool isRecord(const std::string& name, const std::string& what) {
  return name == what || (name.size() > what.size() && name.compare(name.size() - what.size() - 1, what.size() + 1, "/" + what) == 0);
}

bool startsWithPickleMark(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  return in.get(c) && static_cast<unsigned char>(c) == 0x80;
}

constexpr const char* kSaveATrace =
    "save a trace instead: torch.jit.save(torch.jit.trace(model.eval(), example_inputs), 'model.pt')";

}  // namespace

void refuseOtherFormats(const std::string& path, caffe2::serialize::PyTorchStreamReader* archive) {
  if (!archive) {
    if (startsWithPickleMark(path))
      userError("'{}' is a pickle (torch.save's legacy format, or pickle.dump), not a TorchScript archive; load it into "
                "the model in Python, then {}", path, kSaveATrace);
    return;
  }
  std::vector<std::string> names;
  try {
    names = archive->getAllRecords();
  } catch (const std::exception&) {
    return;  // LibTorch's loader says what is wrong, in the caller's words
  }
  bool data = false, code = false, constants = false;
  for (const std::string& name : names) {
    data = data || isRecord(name, "data.pkl");
    constants = constants || isRecord(name, "constants.pkl");
    code = code || name.rfind("code/", 0) == 0 || name.find("/code/") != std::string::npos;
  }
  if (data && !code && !constants)
    userError("'{}' is a torch.save checkpoint (a state_dict or a pickled module), not a traced model; load it into the "
              "model in Python, then {}", path, kSaveATrace);
}

}  // namespace kiln::frontend
