"""kiln from Python: compile a torch.nn.Module with the kiln compiler and call it like the module.

    compiled = kiln.compile(model, (ids,))                  # GPU: kernels emitted and loaded through libkiln_runtime
    compiled = kiln.compile(model, (ids,), interpret=True)  # no GPU: kiln's Kernel-IR interpreter on the CPU
    logits = compiled(ids)
    ids = kiln.generate(hf_model, [5, 17, 42], max_new_tokens=16)     # greedy, over a static cache (kiln generate)

See python/README.md for where the kiln executable and the runtime library are found.
"""
import json
import pathlib
import tempfile

import torch

from ._tool import KilnError, run_kiln
from ._io import DTYPE_NAMES, read_tensor, write_tensor
from ._generate import generate, trace_decoder_step

__all__ = ["compile", "load", "generate", "trace_decoder_step", "CompiledModule", "KilnError", "version"]


def version():
    """The kiln executable's version line ("kiln 0.1.0 (commit ...)")."""
    return run_kiln(["--version"]).splitlines()[0]


class _Spec:
    """One input or output: its name, dtype name ("f32", "bf16", ...) and shape."""

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, list(shape)

    def check(self, tensor, where):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{where}: expected a torch.Tensor, got {type(tensor).__name__}")
        got = DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
        if got != self.dtype or list(tensor.shape) != self.shape:
            raise ValueError(f"{where} ({self.name}) is {got}{list(tensor.shape)}; the model was compiled for "
                             f"{self.dtype}{self.shape}: compile it again for these shapes")


class CompiledModule:
    """A model compiled by kiln; call it with tensors as the module was called with the example inputs."""

    def __init__(self, inputs, workdir, model=None, runtime=None):
        self.inputs = inputs          # [_Spec]
        self._workdir = workdir       # a TemporaryDirectory (or None for kiln.load)
        self._model = model           # the trace, for the interpreter
        self._runtime = runtime       # a _runtime.Runtime on the GPU
        self._calls = 0

    @property
    def interpreted(self):
        return self._runtime is None

    def __call__(self, *args):
        if len(args) != len(self.inputs):
            raise TypeError(f"the compiled model takes {len(self.inputs)} inputs "
                            f"({', '.join(s.name for s in self.inputs)}), got {len(args)}")
        for i, (spec, t) in enumerate(zip(self.inputs, args)):
            spec.check(t, f"input {i}")
        outputs = self._runtime.run(args) if self._runtime else self._interpret(args)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _interpret(self, args):
        self._calls += 1
        call = pathlib.Path(self._workdir.name) / f"call{self._calls}"
        inputs, saved = call / "inputs", call / "io"
        inputs.mkdir(parents=True)
        for i, t in enumerate(args):
            write_tensor(t, inputs / f"input{i}.bin")
        report = json.loads(run_kiln(["run", str(self._model), "--interpret", "--inputs", str(inputs),
                                      "--save-io", str(saved), "--json"]))
        return [read_tensor(saved / f"output{i}.bin", o["dtype"], o["shape"]) for i, o in enumerate(report["outputs"])]


def _trace(module, example_inputs, path):
    """Traces `module` on `example_inputs` and saves it with the inputs' names, shapes and dtypes (kiln_inputs.json,
    as models/kiln_export.py writes it). Returns the input specs."""
    import inspect

    try:
        names = [p for p in inspect.signature(module.forward).parameters if p != "self"]
    except (TypeError, ValueError):
        names = []
    names = (names + [f"x{i}" for i in range(len(example_inputs))])[:len(example_inputs)]
    specs = []
    for name, t in zip(names, example_inputs):
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"input {name} is {t.dtype}; kiln takes {', '.join(str(d) for d in DTYPE_NAMES)}")
        specs.append(_Spec(name, DTYPE_NAMES[t.dtype], t.shape))
    record = {"inputs": [{"name": s.name, "shape": s.shape, "dtype": s.dtype} for s in specs]}
    module.eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, example_inputs, check_trace=False)  # on their device, as the module
    torch.jit.save(traced, str(path), _extra_files={"kiln_inputs.json": json.dumps(record)})
    return specs


def compile(module, example_inputs, dtype=None, arch=None, interpret=False, device=0):  # noqa: A001 -- torch.compile's name
    """Compiles `module` for inputs shaped like `example_inputs` (a tuple of tensors).

    dtype: torch.bfloat16 / torch.float16 / torch.float32 casts the module's floating-point parameters (and the
    example inputs') first. arch: the kiln target ("sm_90a", the default, ...). interpret: run kiln's Kernel-IR
    interpreter on the CPU instead of a GPU (no kernels are compiled by nvcc). device: the CUDA device ordinal."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if dtype is not None:
        import copy

        module = copy.deepcopy(module).to(dtype)
        example_inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in example_inputs)
    workdir = tempfile.TemporaryDirectory(prefix="kiln-")
    model = pathlib.Path(workdir.name) / "model.pt"
    specs = _trace(module, example_inputs, model)
    if interpret:
        return CompiledModule(specs, workdir, model=model)
    out = pathlib.Path(workdir.name) / "kernels"
    args = ["compile", str(model), "--emit", "cuda", "-o", str(out)]
    if arch:
        args += ["--arch", arch]
    run_kiln(args)
    return load(out, device=device, _workdir=workdir)


def load(directory, device=0, _workdir=None):
    """Loads a directory `kiln compile --emit cuda` wrote onto CUDA device `device`."""
    from ._runtime import Runtime

    runtime = Runtime(str(directory), device)
    return CompiledModule([_Spec(*s) for s in runtime.input_specs], _workdir, runtime=runtime)
