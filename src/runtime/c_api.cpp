// The C API (include/kiln/kiln_runtime_c.h) over the C++ one: handles own the C++ objects, exceptions become
// kiln_status codes with the message kept per thread for kiln_last_error().
#include "kiln/kiln_runtime_c.h"

#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln_runtime.h"

struct kiln_model_info {
  kiln::ModelInfo info;
};

struct kiln_runtime {
  kiln::Runtime runtime;
  kiln_model_info info;
};

struct kiln_model {
  kiln::Model model;
  kiln_model_info info;
};

struct kiln_session {
  kiln::Session session;
  kiln_model_info info;
};

namespace {

thread_local std::string lastError;

kiln_status statusOf(kiln::ErrorCode code) { return static_cast<kiln_status>(static_cast<int>(code) + 1); }

kiln_status failed(kiln_status status, const std::string& what) {
  lastError = what;
  return status;
}

// Runs f (which returns nothing), turning every exception into a status and a message.
template <typename F>
kiln_status guarded(F&& f) {
  try {
    f();
    return KILN_OK;
  } catch (const kiln::RuntimeError& e) {
    return failed(statusOf(e.code()), e.what());
  } catch (const std::exception& e) {
    return failed(KILN_INTERNAL, e.what());
  }
}

kiln_status tensorAt(const kiln_model_info* info, size_t i, kiln_tensor_info* tensor, bool input) {
  if (!info || !tensor) return failed(KILN_INVALID_ARGUMENT, "kiln: a NULL model info or tensor pointer");
  const std::vector<kiln::TensorInfo>& list = input ? info->info.inputs : info->info.outputs;
  if (i >= list.size())
    return failed(KILN_INVALID_ARGUMENT, "kiln: the model has " + std::to_string(list.size()) +
                                             (input ? " inputs" : " outputs") + ", no " + std::to_string(i));
  const kiln::TensorInfo& t = list[i];
  *tensor = kiln_tensor_info{t.name.c_str(), t.dtype.c_str(), t.shape.data(), t.shape.size(), t.bytes,
                             static_cast<kiln_dtype>(static_cast<int>(t.type))};
  return KILN_OK;
}

std::vector<kiln::Buffer> buffersOf(const kiln_buffer* given, size_t count) {
  std::vector<kiln::Buffer> out;
  for (size_t i = 0; i < count; ++i) out.push_back(kiln::Buffer{given[i].host, given[i].device, given[i].bytes});
  return out;
}

// `call`'s forward on a kiln::Runtime or kiln::Session (`what`; null is an error), the arrays checked first.
template <typename Runner>
kiln_status runOn(Runner* runner, const std::string& call, const char* what, const kiln_buffer* inputs,
                  size_t input_count, const kiln_buffer* outputs, size_t output_count, void* stream) {
  if (!runner) return failed(KILN_INVALID_ARGUMENT, call + ": a NULL " + what);
  if ((!inputs && input_count) || (!outputs && output_count))
    return failed(KILN_INVALID_ARGUMENT, call + ": a NULL buffer array with a non-zero count");
  return guarded([&] {
    kiln::RunOptions options;
    options.stream = stream;
    runner->run(buffersOf(inputs, input_count), buffersOf(outputs, output_count), options);
  });
}

}  // namespace

extern "C" {

const char* kiln_version(void) { return kiln::version(); }

const char* kiln_status_name(kiln_status status) {
  if (status == KILN_OK) return "ok";
  if (status < KILN_OK || status > KILN_INTERNAL) return "unknown";
  return kiln::errorCodeName(static_cast<kiln::ErrorCode>(static_cast<int>(status) - 1));
}

const char* kiln_last_error(void) { return lastError.c_str(); }

kiln_status kiln_describe(const char* dir, kiln_model_info** info) {
  if (!dir || !info) return failed(KILN_INVALID_ARGUMENT, "kiln_describe: a NULL directory or result pointer");
  *info = nullptr;
  return guarded([&] { *info = new kiln_model_info{kiln::describe(dir)}; });
}

void kiln_model_info_free(kiln_model_info* info) { delete info; }

const char* kiln_model_info_name(const kiln_model_info* info) { return info ? info->info.model.c_str() : ""; }
const char* kiln_model_info_arch(const kiln_model_info* info) { return info ? info->info.arch.c_str() : ""; }
size_t kiln_model_info_inputs(const kiln_model_info* info) { return info ? info->info.inputs.size() : 0; }
size_t kiln_model_info_outputs(const kiln_model_info* info) { return info ? info->info.outputs.size() : 0; }

kiln_status kiln_model_info_input(const kiln_model_info* info, size_t i, kiln_tensor_info* tensor) {
  return tensorAt(info, i, tensor, true);
}

kiln_status kiln_model_info_output(const kiln_model_info* info, size_t i, kiln_tensor_info* tensor) {
  return tensorAt(info, i, tensor, false);
}

size_t kiln_model_info_weight_bytes(const kiln_model_info* info) { return info ? info->info.weightBytes : 0; }
size_t kiln_model_info_session_bytes(const kiln_model_info* info) { return info ? info->info.sessionBytes : 0; }

kiln_status kiln_runtime_open(const char* dir, int device, kiln_runtime** runtime) {
  if (!dir || !runtime) return failed(KILN_INVALID_ARGUMENT, "kiln_runtime_open: a NULL directory or result pointer");
  *runtime = nullptr;
  return guarded([&] {
    kiln::Runtime rt(dir, kiln::RuntimeOptions{device});
    kiln::ModelInfo info = rt.info();
    *runtime = new kiln_runtime{std::move(rt), kiln_model_info{std::move(info)}};
  });
}

void kiln_runtime_close(kiln_runtime* runtime) { delete runtime; }

const kiln_model_info* kiln_runtime_info(const kiln_runtime* runtime) { return runtime ? &runtime->info : nullptr; }

kiln_status kiln_runtime_run(kiln_runtime* runtime, const kiln_buffer* inputs, size_t input_count,
                             const kiln_buffer* outputs, size_t output_count, void* stream) {
  return runOn(runtime ? &runtime->runtime : nullptr, "kiln_runtime_run", "runtime", inputs, input_count, outputs,
               output_count, stream);
}

kiln_status kiln_model_open(const char* dir, int device, kiln_model** model) {
  if (!dir || !model) return failed(KILN_INVALID_ARGUMENT, "kiln_model_open: a NULL directory or result pointer");
  *model = nullptr;
  return guarded([&] {
    kiln::Model m(dir, kiln::RuntimeOptions{device});
    kiln::ModelInfo info = m.info();
    *model = new kiln_model{std::move(m), kiln_model_info{std::move(info)}};
  });
}

void kiln_model_close(kiln_model* model) { delete model; }

const kiln_model_info* kiln_model_get_info(const kiln_model* model) { return model ? &model->info : nullptr; }

kiln_status kiln_session_open(const kiln_model* model, const char* entry, kiln_session** session) {
  if (!model || !session) return failed(KILN_INVALID_ARGUMENT, "kiln_session_open: a NULL model or result pointer");
  *session = nullptr;
  return guarded([&] {
    kiln::Session s(model->model, entry ? entry : "");
    kiln::ModelInfo info = s.info();
    *session = new kiln_session{std::move(s), kiln_model_info{std::move(info)}};
  });
}

void kiln_session_close(kiln_session* session) { delete session; }

const kiln_model_info* kiln_session_get_info(const kiln_session* session) { return session ? &session->info : nullptr; }

kiln_status kiln_session_run(kiln_session* session, const kiln_buffer* inputs, size_t input_count,
                             const kiln_buffer* outputs, size_t output_count, void* stream) {
  return runOn(session ? &session->session : nullptr, "kiln_session_run", "session", inputs, input_count, outputs,
               output_count, stream);
}

}  // extern "C"
