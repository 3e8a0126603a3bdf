"""torch.export archives (.pt2) for kiln's tests of `kiln compile/run model.pt2` (src/frontend/exported_program.cpp).

    python3 models/exported_programs.py DIR

writes into DIR:
  llama.pt2          the tiny transformers Llama (hf_llama.py, random weights) on 16 token ids, exported under
                     torch.no_grad() (its rotary block's own no_grad then leaves no higher-order op in the graph)
  gated.pt2          silu(gate(x)) * up(y) + b: two inputs, a parameter-free buffer, exported as is
  gemma2.pt2, deepseek_v3.pt2   hf_families.py's tiny Gemma-2 (softcapping, sliding windows) and DeepSeek-V3 (mixture
                     of experts; its mask's -inf is written "-Infinity" in the program), under torch.no_grad()
  llama_grad.pt2     the same Llama exported with gradients on: its graph holds a higher-order op (refused)
  dynamic.pt2        gated with a dynamic batch dimension (refused: kiln compiles fixed shapes)
  damaged/NAME.pt2   gated.pt2 with one record damaged, each refused in one line (exported_program.cpp): truncated,
                     wrong_type, unknown_op, past_storage, overflowing_stride, missing_weight, unknown_value, deep
"""
import json
import pathlib
import shutil
import sys
import tempfile
import zipfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import hf_families  # noqa: E402
import hf_llama  # noqa: E402


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.gate = torch.nn.Linear(64, 128), torch.nn.Linear(64, 128)
        self.register_buffer("b", torch.linspace(-1, 1, 128))

    def forward(self, x, y):
        return torch.nn.functional.silu(self.gate(x)) * self.up(y) + self.b


def _edit_json(record, edit):
    def apply(root):
        path = next(root.glob("*/" + record))
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return apply


def _sizes(index, value, field="sizes"):
    def edit(config):
        for entry in config["config"].values():
            entry["tensor_meta"][field][index] = {"as_int": value}
    return edit


def _first_node(key, value):
    def edit(program):
        node = program["graph_module"]["graph"]["nodes"][0]
        if key == "input":
            node["inputs"][0]["arg"] = value
        else:
            node[key] = value
    return edit


def _rewrite(root, pattern, text):
    path = next(root.glob("*/" + pattern))
    path.write_text(text(path.read_text()))


DAMAGES = {
    "truncated": lambda root: _rewrite(root, "models/model.json", lambda t: t[:100]),
    "wrong_type": _edit_json("models/model.json", _first_node("target", 5)),
    "unknown_op": _edit_json("models/model.json", _first_node("target", "torch.ops.aten.no_such_op.default")),
    "past_storage": _edit_json("data/weights/model_weights_config.json", _sizes(0, 1 << 40)),
    "overflowing_stride": _edit_json("data/weights/model_weights_config.json", _sizes(0, 1 << 62, "strides")),
    "missing_weight": lambda root: next(root.glob("*/data/weights/weight_0")).unlink(),
    "unknown_value": _edit_json("models/model.json", _first_node("input", {"as_tensor": {"name": "nope"}})),
    "deep": lambda root: _rewrite(root, "models/model.json", lambda t: "[" * 100000 + "]" * 100000),
}


def damaged(archive, out):
    """Writes out/NAME.pt2 for each of DAMAGES: `archive` unpacked, one record changed, packed again (stored)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, damage in DAMAGES.items():
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            zipfile.ZipFile(archive).extractall(root)
            damage(root)
            with zipfile.ZipFile(out / f"{name}.pt2", "w", zipfile.ZIP_STORED) as z:
                for f in sorted(root.rglob("*")):
                    if f.is_file():
                        z.write(f, f.relative_to(root).as_posix())


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    llama = hf_llama.build("tiny")
    ids = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        torch.export.save(torch.export.export(llama, (ids,)), out / "llama.pt2")
    torch.export.save(torch.export.export(llama, (ids,)), out / "llama_grad.pt2")
    for family in ("gemma2", "deepseek_v3"):
        with torch.no_grad():
            torch.export.save(torch.export.export(hf_families.build(family), (ids,)), out / f"{family}.pt2")
    gated = Gated().eval()
    x, y = torch.randn(4, 64), torch.randn(4, 64)
    with torch.no_grad():
        torch.export.save(torch.export.export(gated, (x, y)), out / "gated.pt2")
        batch = torch.export.Dim("batch", min=2, max=64)
        torch.export.save(torch.export.export(gated, (x, y), dynamic_shapes=({0: batch}, {0: batch})), out / "dynamic.pt2")
    damaged(out / "gated.pt2", out / "damaged")


if __name__ == "__main__":
    main(sys.argv[1])
