/* Runs a directory written by `kiln compile MODEL.pt --emit cuda -o DIR` through kiln's C API (kiln_runtime_c.h):
   the tensors listed, the model loaded (its weights once) and a session opened on it, the inputs `kiln run DIR
   --save-io IO` wrote (zeros without IO) fed in, each output's FNV-1a checksum printed, as kiln run prints it. A server
   would open one session per thread on the same model.
     usage: run_emitted_c DIR [IO] */
#include <kiln/kiln_runtime_c.h>

#include <stdio.h>
#include <stdlib.h>

static int fail(const char* call, kiln_status status) {
  fprintf(stderr, "run_emitted_c: %s: %s (%s)\n", call, kiln_last_error(), kiln_status_name(status));
  return 1;
}

static void* readInput(const char* io, size_t i, size_t bytes) {
  unsigned char* data = calloc(bytes ? bytes : 1, 1);
  char path[4096];
  FILE* f;
  if (!io || !data) return data;
  snprintf(path, sizeof path, "%s/input%zu.bin", io, i);
  f = fopen(path, "rb");
  if (!f || fread(data, 1, bytes, f) != bytes) {
    fprintf(stderr, "run_emitted_c: cannot read %zu bytes from %s\n", bytes, path);
    exit(1);
  }
  fclose(f);
  return data;
}

int main(int argc, char** argv) {
  kiln_model_info* info = NULL;
  kiln_model* model = NULL;
  kiln_session* session = NULL;
  kiln_buffer inputs[16], outputs[16];
  kiln_tensor_info t;
  size_t i, j, nin, nout;
  kiln_status s;
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [IO]\n", argv[0]);
    return 2;
  }
  if ((s = kiln_describe(argv[1], &info)) != KILN_OK) return fail("kiln_describe", s); /* no GPU needed */
  nin = kiln_model_info_inputs(info);
  nout = kiln_model_info_outputs(info);
  printf("%s for %s (runtime %s): %zu inputs, %zu outputs\n", kiln_model_info_name(info), kiln_model_info_arch(info),
         kiln_version(), nin, nout);
  if (nin > 16 || nout > 16) return fprintf(stderr, "run_emitted_c: more than 16 inputs or outputs\n"), 1;
  for (i = 0; i < nin; ++i) {
    kiln_model_info_input(info, i, &t);
    printf("input %zu '%s' %s, %zu bytes\n", i, t.name, t.dtype, t.bytes);
    inputs[i].host = readInput(argc > 2 ? argv[2] : NULL, i, t.bytes);
    inputs[i].device = 0;
    inputs[i].bytes = t.bytes;
  }
  for (i = 0; i < nout; ++i) {
    kiln_model_info_output(info, i, &t);
    outputs[i].host = calloc(t.bytes ? t.bytes : 1, 1);
    outputs[i].device = 0;
    outputs[i].bytes = t.bytes;
  }
  if ((s = kiln_model_open(argv[1], 0, &model)) != KILN_OK) return fail("kiln_model_open", s);
  if ((s = kiln_session_open(model, NULL, &session)) != KILN_OK) return fail("kiln_session_open", s);
  if ((s = kiln_session_run(session, inputs, nin, outputs, nout, NULL)) != KILN_OK) return fail("kiln_session_run", s);
  for (i = 0; i < nout; ++i) {
    unsigned long long sum = 14695981039346656037ull;
    const unsigned char* b = outputs[i].host;
    kiln_model_info_output(info, i, &t);
    for (j = 0; j < t.bytes; ++j) sum = (sum ^ b[j]) * 1099511628211ull;
    printf("output %zu '%s' %s: %zu bytes, fnv1a %016llx\n", i, t.name, t.dtype, t.bytes, sum);
  }
  kiln_session_close(session);
  kiln_model_close(model);
  kiln_model_info_free(info);
  return 0;
}
