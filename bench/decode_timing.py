"""Decode speed on the GPU, kiln against transformers in the same run (issue 50's measurement, first form).

A Llama of hf_llama.py's preset (tinyllama: the 1.1B shape) with random weights, in bf16, over a static cache of
--cache positions: transformers' model.generate(cache_implementation="static", eager) timed on the GPU, then the
decoder step traced on the CPU (models/hf_decode.py's recipe) and `kiln generate` run on it. Per-token time of
transformers: (time for --new tokens - time for 8 tokens) / (--new - 8), CUDA-synchronised wall clock, best of 3;
kiln's is what `kiln generate` prints (wall clock around each decode forward, argmax and the logits' copy included).
Also checks that kiln's ids equal transformers' for the first 16 new tokens. transformers sizes its static cache to the
prompt and new tokens (76 positions here); kiln's is --cache, of which attention reads only the live keys.

    python3 bench/decode_timing.py build/kiln --preset tinyllama --cache 2048 --new 64 --out /tmp/decode
"""
import argparse
import pathlib
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
import hf_decode  # noqa: E402

PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203]


def hf_seconds(model, new):
    ids = torch.tensor([PROMPT], device="cuda")
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                 cache_implementation="static", attention_mask=torch.ones_like(ids))
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, [int(x) for x in out[0]]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kiln")
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--cache", type=int, default=2048)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/kiln-decode-timing"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    model = hf_decode.build("llama", "bf16", preset=a.preset)
    gpu = model.cuda()
    hf_seconds(gpu, 8)  # warm-up
    short, _ = hf_seconds(gpu, 8)
    long, hf_ids = hf_seconds(gpu, a.new)
    hf_ms = (long - short) / (a.new - 8) * 1e3
    model = gpu.cpu()
    del gpu
    torch.cuda.empty_cache()
    step = a.out / f"{a.preset}_step.pt"
    hf_decode.trace(model, a.cache, 1, step)
    cmd = [a.kiln, "generate", str(step), "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", str(a.new)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    (a.out / "kiln_generate.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        sys.exit(f"kiln generate failed ({run.returncode}): {run.stderr.strip().splitlines()[-1]}")
    kiln_ids = [int(x) for x in run.stdout.strip().split(",")]
    times = re.search(r"first token after ([0-9.]+) ms, then ([0-9.]+) ms per token", run.stderr)
    n = len(PROMPT) + 16
    print(f"{a.preset} bf16, cache {a.cache}, {len(PROMPT)}-token prompt, {a.new} new tokens, {torch.cuda.get_device_name()}")
    print(f"| what | ms per token |\n|---|---|\n| transformers generate, static cache (eager) | {hf_ms:.3f} |")
    print(f"| kiln generate | {times.group(2) if times else '?'} (first token after {times.group(1) if times else '?'} ms) |")
    print(f"first 16 new ids {'equal' if kiln_ids[:n] == hf_ids[:n] else 'DIFFER'} (bf16: ties may differ)")


if __name__ == "__main__":
    main()
