"""Tensors as the bytes kiln reads and writes (`kiln run --inputs` / `--save-io`: row-major, the dtype's own bytes)."""
import math

import torch

DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64", torch.bool: "bool"}
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


def tensor_bytes(t):
    """t's elements, row-major, as bytes (copied to the CPU)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def write_tensor(t, path):
    path.write_bytes(tensor_bytes(t))


def read_tensor(path, dtype, shape):
    """The tensor of `dtype` (kiln's name) and `shape` whose bytes `path` holds."""
    data = bytearray(path.read_bytes())
    t = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    want = math.prod(shape) * torch.empty(0, dtype=DTYPES[dtype]).element_size()
    if t.numel() != want:
        raise ValueError(f"{path} holds {t.numel()} bytes; a {dtype}{list(shape)} tensor has {want}")
    return t.view(DTYPES[dtype]).reshape(shape).clone()
