"""The installed `kiln` package against the modules it compiles (run by tests/python/package_test.sh in a fresh venv).

Each check prints one line; any failure raises. Usage: package_check.py REPO_ROOT (with KILN_BINARY set)."""
import copy
import pathlib
import sys

import torch

import kiln

root = pathlib.Path(sys.argv[1])
assert not str(pathlib.Path(kiln.__file__).resolve()).startswith(str(root / "python")), \
    f"imported {kiln.__file__}, not the installed package"
sys.path.insert(0, str(root / "models"))
import hf_llama  # noqa: E402


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


print(kiln.version())

# A tiny transformers Llama (random weights) on token ids: the interpreter's logits match the module's at f32's bound.
torch.manual_seed(0)
model = hf_llama.build("tiny")
ids = torch.randint(0, 256, (1, 16))
compiled = kiln.compile(model, (ids,), interpret=True)
assert compiled.interpreted and [s.name for s in compiled.inputs] == ["input_ids"], compiled.inputs
for seed in (1, 2):  # the compiled model takes other ids of the same shape
    other = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = model(other)
    got = compiled(other)
    err = rel_l2(got, want)
    assert got.dtype == torch.float32 and got.shape == want.shape and err < 1e-5, (got.shape, err)
    print(f"tiny Llama, ids seed {seed}: logits {list(got.shape)} rel_l2 {err:.2e} against the module: PASS")


# A module of two inputs compiled in bf16: judged as kiln's check judges bf16 (DESIGN.md §4), against the module in f32.
class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.gate = torch.nn.Linear(64, 128), torch.nn.Linear(64, 128)

    def forward(self, x, y):
        return torch.nn.functional.silu(self.gate(x)) * self.up(y)


gated = Gated()
x, y = torch.randn(4, 64), torch.randn(4, 64)
low = kiln.compile(gated, (x, y), dtype=torch.bfloat16, interpret=True)
out = low(x.bfloat16(), y.bfloat16())
rounded = copy.deepcopy(gated).to(torch.bfloat16)  # Module.to casts in place: gated stays f32 for the GPU path below
with torch.no_grad():
    torch_bf16 = rounded(x.bfloat16(), y.bfloat16()).float()
    f32 = rounded.float()(x.bfloat16().float(), y.bfloat16().float())
kiln_err, torch_err = rel_l2(out.float(), f32), rel_l2(torch_bf16, f32)
assert out.dtype == torch.bfloat16 and kiln_err <= 1.5 * torch_err + 1e-3, (kiln_err, torch_err)
print(f"two inputs in bf16: kiln rel_l2 {kiln_err:.2e}, LibTorch {torch_err:.2e} against f32: PASS")

# Wrong inputs are refused in one sentence, before kiln runs.
for bad, why in [((torch.randint(0, 256, (1, 8)),), "shape"), ((ids.float(),), "dtype"), ((), "count")]:
    try:
        compiled(*bad)
    except (ValueError, TypeError) as e:
        assert "\n" not in str(e), e
        print(f"a wrong {why} is refused: {e}")
    else:
        raise AssertionError(f"a wrong {why} was accepted")

# Greedy generation over a static cache (kiln generate, interpreted): f32 ids equal transformers' model.generate's.
hf = model.model  # the bare LlamaForCausalLM inside hf_llama's logits-only wrapper
prompt = [5, 17, 42]
ids = kiln.generate(hf, prompt, max_new_tokens=6, interpret=True)
with torch.no_grad():
    want = hf.generate(torch.tensor([prompt]), max_new_tokens=6, min_new_tokens=6, do_sample=False,
                       attention_mask=torch.ones(1, 3, dtype=torch.long))[0].tolist()
assert ids == want, (ids, want)
print(f"kiln.generate: {ids} equal model.generate's: PASS")

# The GPU path without a GPU: kiln emits the kernels (nvcc), then the runtime library says why it cannot load them.
if torch.cuda.is_available():
    print("a GPU is here: the GPU path is checked by the device scripts, not here")
else:
    try:
        kiln.compile(gated, (x, y))
    except kiln.KilnError as e:
        assert "\n" not in str(e) and str(e), e
        print(f"no GPU: kiln.compile raises KilnError: {e}")
    else:
        raise AssertionError("kiln.compile loaded kernels without a GPU")
print("kiln Python package: PASS")
