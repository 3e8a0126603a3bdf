"""kiln's runtime library through its C API (include/kiln/kiln_runtime_c.h), with ctypes."""
import ctypes
import os
import pathlib

import torch

from ._io import DTYPES
from ._tool import KilnError, kiln_binary


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("rank", ctypes.c_size_t), ("bytes", ctypes.c_size_t), ("type", ctypes.c_int)]  # kiln_runtime_c.h


class _Buffer(ctypes.Structure):
    _fields_ = [("host", ctypes.c_void_p), ("device", ctypes.c_uint64), ("bytes", ctypes.c_size_t)]


def library_path():
    """$KILN_RUNTIME_LIBRARY, else libkiln_runtime.so in lib/ beside the kiln executable (a build tree) or in ../lib (an
    installed prefix)."""
    if os.environ.get("KILN_RUNTIME_LIBRARY"):
        return pathlib.Path(os.environ["KILN_RUNTIME_LIBRARY"])
    binary = pathlib.Path(kiln_binary()).resolve().parent
    for candidate in (binary / "lib" / "libkiln_runtime.so", binary.parent / "lib" / "libkiln_runtime.so"):
        if candidate.is_file():
            return candidate
    raise KilnError(f"libkiln_runtime.so is neither in {binary / 'lib'} nor in {binary.parent / 'lib'}: build it "
                    "(cmake --build build --target kiln_runtime_shared) or set KILN_RUNTIME_LIBRARY")


_lib = None


def library():
    """The loaded runtime library, its functions typed."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(library_path()))
        p = ctypes.c_void_p
        for name, args, result in [
            ("kiln_last_error", [], ctypes.c_char_p),
            ("kiln_describe", [ctypes.c_char_p, ctypes.POINTER(p)], ctypes.c_int),
            ("kiln_model_info_free", [p], None),
            ("kiln_model_info_inputs", [p], ctypes.c_size_t),
            ("kiln_model_info_outputs", [p], ctypes.c_size_t),
            ("kiln_model_info_input", [p, ctypes.c_size_t, ctypes.POINTER(_TensorInfo)], ctypes.c_int),
            ("kiln_model_info_output", [p, ctypes.c_size_t, ctypes.POINTER(_TensorInfo)], ctypes.c_int),
            ("kiln_runtime_open", [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(p)], ctypes.c_int),
            ("kiln_runtime_close", [p], None),
            ("kiln_runtime_info", [p], p),
            ("kiln_runtime_run", [p, ctypes.POINTER(_Buffer), ctypes.c_size_t, ctypes.POINTER(_Buffer), ctypes.c_size_t, p],
             ctypes.c_int),
        ]:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, result
        _lib = lib
    return _lib


def _check(status):
    if status != 0:
        raise KilnError(library().kiln_last_error().decode())


def _specs(info, count, get):
    specs = []
    for i in range(count(info)):
        t = _TensorInfo()
        _check(get(info, i, ctypes.byref(t)))
        specs.append((t.name.decode(), t.dtype.decode(), [t.shape[d] for d in range(t.rank)]))
    return specs


def describe(directory):
    """(inputs, outputs) of an emitted directory, each [(name, dtype, shape)]: its manifest alone, no GPU needed."""
    lib, info = library(), ctypes.c_void_p()
    _check(lib.kiln_describe(str(directory).encode(), ctypes.byref(info)))
    try:
        return (_specs(info, lib.kiln_model_info_inputs, lib.kiln_model_info_input),
                _specs(info, lib.kiln_model_info_outputs, lib.kiln_model_info_output))
    finally:
        lib.kiln_model_info_free(info)


class Runtime:
    """An emitted directory loaded onto CUDA device `device`; run() binds torch CUDA tensors as device buffers."""

    def __init__(self, directory, device):
        lib = library()
        self.device = torch.device("cuda", device)
        self._handle = ctypes.c_void_p()
        _check(lib.kiln_runtime_open(directory.encode(), device, ctypes.byref(self._handle)))
        info = lib.kiln_runtime_info(self._handle)
        self.input_specs = _specs(info, lib.kiln_model_info_inputs, lib.kiln_model_info_input)
        self.output_specs = _specs(info, lib.kiln_model_info_outputs, lib.kiln_model_info_output)

    def run(self, inputs):
        for i, t in enumerate(inputs):
            if t.device != self.device or not t.is_contiguous():
                raise ValueError(f"input {i} is on {t.device}{'' if t.is_contiguous() else ', not contiguous'}; the "
                                 f"model runs on {self.device}: pass contiguous tensors there (t.to('{self.device}'))")
        outputs = [torch.empty(shape, dtype=DTYPES[dtype], device=self.device) for _, dtype, shape in self.output_specs]

        def buffers(tensors):
            array = (_Buffer * max(len(tensors), 1))()
            for i, t in enumerate(tensors):
                array[i] = _Buffer(None, t.data_ptr(), t.numel() * t.element_size())
            return array

        stream = torch.cuda.current_stream(self.device).cuda_stream
        _check(library().kiln_runtime_run(self._handle, buffers(inputs), len(inputs), buffers(outputs), len(outputs),
                                          ctypes.c_void_p(stream)))
        return outputs

    def __del__(self):
        if getattr(self, "_handle", None) and _lib is not None:
            _lib.kiln_runtime_close(self._handle)
            self._handle = None
