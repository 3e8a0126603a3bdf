"""Decode speed on the GPU, kiln against transformers in the same run (issue 50's measurement).

A Llama of hf_llama.py's preset (tinyllama: the 1.1B shape) with random weights, in bf16, over a static cache of
--cache positions. For each prompt length n (--prompts; the prompt is 1 + 7919 i mod 31999, i < n):
  - transformers' model.generate into a StaticCache of --cache positions made here (so every run has the same shapes
    and torch.compile compiles once), twice: eager (disable_compile=True) and with the forward compiled as generate
    itself does for static caches (CompileConfig: fullgraph, mode "reduce-overhead", i.e. CUDA graphs). The time to
    first token is a generate of 1 new token; ms per token is (time for --new tokens - time for 8) / (--new - 8);
    CUDA-synchronised wall clock, best of 3 after a warm-up.
  - the decoder step traced on the CPU (models/hf_decode.py's recipe) and `kiln generate STEP --prefill-chunk 128` run
    on it twice (the second run is tabled: its entries are compiled into the cache by then); its first-token time and
    ms per token are what kiln generate prints (wall clock around each forward and reading the greedy token).
Also says whether kiln's first 16 new ids equal eager transformers' (in bf16 near-ties may part). Prints a markdown
table and writes OUT/decode_timing.json, one row per (what, prompt).

    python3 bench/decode_timing.py build/kiln --preset tinyllama --cache 2048 --new 64 --prompts 12,500,1984 --out /tmp/d
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
import hf_decode  # noqa: E402


def prompt_of(n):
    return [1 + 7919 * i % 31999 for i in range(n)]


def hf_seconds(model, prompt, new, cache, compiled):
    """Best of 3 seconds for model.generate of `new` tokens after `prompt` into `cache` (reset first), and the ids."""
    from transformers import CompileConfig

    ids = torch.tensor([prompt], device="cuda")
    best, out = float("inf"), None
    for _ in range(3):
        cache.reset()
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, past_key_values=cache,
                                 cache_implementation=None,
                                 attention_mask=torch.ones_like(ids), disable_compile=not compiled,
                                 compile_config=CompileConfig(fullgraph=True, mode="reduce-overhead"))
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, [int(x) for x in out[0]]


def time_transformers(model, prompt, new, cache, compiled):
    hf_seconds(model, prompt, new, cache, compiled)  # warm-up (and torch.compile's compilation)
    first, _ = hf_seconds(model, prompt, 1, cache, compiled)
    short, _ = hf_seconds(model, prompt, 8, cache, compiled)
    long, ids = hf_seconds(model, prompt, new, cache, compiled)
    return first * 1e3, (long - short) / (new - 8) * 1e3, ids


def time_kiln(kiln, step, prompt, new, log):
    cmd = [kiln, "generate", str(step), "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", str(new),
           "--prefill-chunk", "128"]
    for _ in range(2):
        run = subprocess.run(cmd, capture_output=True, text=True)
        log.write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            sys.exit(f"kiln generate failed ({run.returncode}): {(run.stderr.strip().splitlines() or ['?'])[-1]}")
    times = re.search(r"first token after ([0-9.]+) ms, then ([0-9.]+) ms per token", run.stderr)
    return float(times.group(1)), float(times.group(2)), [int(x) for x in run.stdout.strip().split(",")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kiln")
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--cache", type=int, default=2048)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--prompts", default="12,1984", help="prompt lengths, comma-separated")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/kiln-decode-timing"))
    a = p.parse_args()
    from transformers import StaticCache

    a.out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in a.prompts.split(",")]
    if any(n + a.new > a.cache for n in lengths):
        sys.exit(f"--prompts {a.prompts} with --new {a.new} do not fit a cache of {a.cache}")
    model = hf_decode.build("llama", "bf16", preset=a.preset)
    step = a.out / f"{a.preset}_step.pt"
    hf_decode.trace(model, a.cache, 1, step)  # on the CPU, before the model moves
    gpu = model.cuda()
    cache = StaticCache(config=gpu.config, max_cache_len=a.cache)
    rows = []
    for n in lengths:
        prompt = prompt_of(n)
        hf_ids = None
        for compiled in (False, True):
            first, per_token, ids = time_transformers(gpu, prompt, a.new, cache, compiled)
            hf_ids = hf_ids or ids
            rows.append({"what": "transformers generate, static cache, " + ("torch.compile" if compiled else "eager"),
                         "prompt": n, "first_token_ms": first, "ms_per_token": per_token})
        first, per_token, ids = time_kiln(a.kiln, step, prompt, a.new, a.out / f"kiln-{n}.log")
        same = ids[:n + 16] == hf_ids[:n + 16]
        rows.append({"what": "kiln generate", "prompt": n, "first_token_ms": first, "ms_per_token": per_token,
                     "first_16_ids_equal_eager": same})
    gpu_name = torch.cuda.get_device_name()
    meta = {"preset": a.preset, "dtype": "bf16", "cache": a.cache, "new_tokens": a.new, "batch": 1, "gpu": gpu_name,
            "torch": torch.__version__}
    (a.out / "decode_timing.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"{a.preset} bf16, batch 1, cache {a.cache}, {a.new} new tokens, {gpu_name}, torch {torch.__version__}")
    print("| prompt | what | first token (ms) | ms per token | ids |\n|---|---|---|---|---|")
    for r in rows:
        ids = "" if "first_16_ids_equal_eager" not in r else ("first 16 = eager" if r["first_16_ids_equal_eager"]
                                                                else "first 16 DIFFER from eager")
        print(f"| {r['prompt']} | {r['what']} | {r['first_token_ms']:.3f} | {r['ms_per_token']:.3f} | {ids} |")


if __name__ == "__main__":
    main()
