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
    # Everything below stays below main(): the fixtures' debug info records this file's line numbers (24, 28).
    # hf_llama_tiny_bf16.pt comes from a direct run of hf_llama.py in its own process, as the committed file
    # was made: run in this process its classes' mangled names and recorded call stack would differ.
    import subprocess
    subprocess.run([sys.executable, str(HERE / "hf_llama.py"), "--dtype", "bf16",
                    "-o", str(HERE / "fixtures" / "hf_llama_tiny_bf16.pt")], check=True)
    # layers.pt and the hf_<family>_tiny.pt of hf_families.py were made by direct runs too (the GPT-2 golden
    # records mangled names and lines that a shared process would change).
    for script in ("layers.py", "hf_families.py", "attention_bf16.py", "mlp_bf16_wide.py", "hf_decode.py"):
        subprocess.run([sys.executable, str(HERE / script)], check=True)
    subprocess.run([sys.executable, str(HERE / "hf_families.py"), "--bf16"], check=True)
    subprocess.run([sys.executable, str(HERE / "hf_families.py"), "--default-cache"], check=True)
    subprocess.run([sys.executable, str(HERE / "hf_families.py"), "--grouped"], check=True)
    subprocess.run([sys.executable, str(HERE / "hf_families.py"), "--encoders"], check=True)
    # The decoder step with a cache of 256 positions: attention's key steps skipped past the run-time length.
    subprocess.run([sys.executable, str(HERE / "hf_decode.py"), "--cache", "256",
                    "-o", str(HERE / "fixtures" / "hf_llama_decode_long.pt")], check=True)
