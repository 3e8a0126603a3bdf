"""Regenerate every fixture under models/fixtures/. Works from any cwd."""
import importlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODELS = [
    "elementwise",
    "reductions",
    "rmsnorm",
    "rmsnorm_aten",
    "softmax",
    "linear",
    "mlp",
    "attention",
    "shapes", "llama", "hf_llama",  # llama -> llama_tiny.pt, hf_llama -> hf_llama_tiny.pt
]


def main():
    for name in MODELS:
        importlib.import_module(name).main()


if __name__ == "__main__":
    main()
