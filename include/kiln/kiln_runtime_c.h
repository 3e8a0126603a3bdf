/* kiln's runtime as a C API, for programs in C and for foreign-function interfaces (Python's ctypes, Rust, Go): the
   same library and semantics as <kiln/kiln_runtime.h>, with opaque handles and status codes instead of classes and
   exceptions. Link kiln::runtime (the shared library) from find_package(kiln).

       kiln_runtime* rt;
       if (kiln_runtime_open("out", 0, &rt) != KILN_OK) { fprintf(stderr, "%s\n", kiln_last_error()); return 1; }
       kiln_buffer in[1] = {{x, 0, sizeof x}}, out[1] = {{y, 0, sizeof y}};
       kiln_status s = kiln_runtime_run(rt, in, 1, out, 1, NULL);
       kiln_runtime_close(rt);

   Every function that can fail returns a kiln_status; on failure kiln_last_error() is the one-line message (per
   thread, until that thread's next failing call). Handles are not thread-safe (one kiln_runtime per thread, as for
   kiln::Runtime). A NULL handle or output pointer is KILN_INVALID_ARGUMENT, never a crash. */
#ifndef KILN_RUNTIME_C_H
#define KILN_RUNTIME_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_C_API __attribute__((visibility("default")))

/* kiln::ErrorCode, in the same order, after KILN_OK. */
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT,
  KILN_BAD_MODEL,
  KILN_NO_DEVICE,
  KILN_UNSUPPORTED,
  KILN_DRIVER,
  KILN_INTERNAL
} kiln_status;

typedef struct kiln_model_info kiln_model_info; /* what a directory holds: kiln_describe, kiln_runtime_info */
typedef struct kiln_runtime kiln_runtime;       /* a model loaded onto a GPU with one session: kiln_runtime_open */
typedef struct kiln_model kiln_model;           /* a model loaded onto a GPU, weights once: kiln_model_open */
typedef struct kiln_session kiln_session;       /* one stream of forwards over a kiln_model: kiln_session_open */

/* kiln::DataType, in the same order. */
typedef enum kiln_dtype { KILN_F32 = 0, KILN_BF16, KILN_F16, KILN_I64, KILN_BOOL } kiln_dtype;

/* One input or output. The pointers live as long as the kiln_model_info they came from. */
typedef struct kiln_tensor_info {
  const char* name;
  const char* dtype; /* "f32", "bf16", "f16", "i64", "bool": the name of `type` */
  const int64_t* shape;
  size_t rank;
  size_t bytes; /* what its buffer must hold */
  kiln_dtype type;
} kiln_tensor_info;

/* A host pointer or a device pointer (CUdeviceptr), exactly one, and the bytes it holds (checked). */
typedef struct kiln_buffer {
  void* host;
  uint64_t device;
  size_t bytes;
} kiln_buffer;

KILN_C_API const char* kiln_version(void);
KILN_C_API const char* kiln_status_name(kiln_status status); /* "ok", "invalid-argument", ... */
KILN_C_API const char* kiln_last_error(void);                /* "" when this thread has had no failure */

/* The manifest of DIR alone: no GPU needed. Free with kiln_model_info_free. */
KILN_C_API kiln_status kiln_describe(const char* dir, kiln_model_info** info);
KILN_C_API void kiln_model_info_free(kiln_model_info* info);
KILN_C_API const char* kiln_model_info_name(const kiln_model_info* info);
KILN_C_API const char* kiln_model_info_arch(const kiln_model_info* info);
KILN_C_API size_t kiln_model_info_inputs(const kiln_model_info* info);
KILN_C_API size_t kiln_model_info_outputs(const kiln_model_info* info);
KILN_C_API kiln_status kiln_model_info_input(const kiln_model_info* info, size_t i, kiln_tensor_info* tensor);
KILN_C_API kiln_status kiln_model_info_output(const kiln_model_info* info, size_t i, kiln_tensor_info* tensor);
/* Device memory a kiln_model allocates for its weights, and each kiln_session for its arena (kiln::ModelInfo). */
KILN_C_API size_t kiln_model_info_weight_bytes(const kiln_model_info* info);
KILN_C_API size_t kiln_model_info_session_bytes(const kiln_model_info* info);

/* Loads DIR onto CUDA device DEVICE. Close with kiln_runtime_close (NULL is fine). */
KILN_C_API kiln_status kiln_runtime_open(const char* dir, int device, kiln_runtime** runtime);
KILN_C_API void kiln_runtime_close(kiln_runtime* runtime);
/* The runtime's model; owned by the runtime (do not free). NULL for a NULL runtime. */
KILN_C_API const kiln_model_info* kiln_runtime_info(const kiln_runtime* runtime);
/* One forward pass on STREAM (a CUstream; NULL: the runtime's own), buffers in the info's order, from a CUDA graph. */
KILN_C_API kiln_status kiln_runtime_run(kiln_runtime* runtime, const kiln_buffer* inputs, size_t input_count,
                                        const kiln_buffer* outputs, size_t output_count, void* stream);

/* kiln::Model and kiln::Session: DIR loaded onto DEVICE once (kernels and weights), and any number of sessions on it,
   each with its own arena (inputs, outputs, activations), which may run concurrently from different threads. A session
   keeps its model's device state alive: the model may be closed first. */
KILN_C_API kiln_status kiln_model_open(const char* dir, int device, kiln_model** model);
KILN_C_API void kiln_model_close(kiln_model* model);
KILN_C_API const kiln_model_info* kiln_model_get_info(const kiln_model* model); /* owned by the model */
/* ENTRY: NULL or "" for the directory's first entry point, or another's name (kiln::Session). */
KILN_C_API kiln_status kiln_session_open(const kiln_model* model, const char* entry, kiln_session** session);
KILN_C_API void kiln_session_close(kiln_session* session);
KILN_C_API const kiln_model_info* kiln_session_get_info(const kiln_session* session); /* its entry's; owned by it */
/* As kiln_runtime_run. Device buffers are bound in place where kiln::Buffer says, else copied. */
KILN_C_API kiln_status kiln_session_run(kiln_session* session, const kiln_buffer* inputs, size_t input_count,
                                        const kiln_buffer* outputs, size_t output_count, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_C_H */
