"""Mixture-of-experts models on the GPU, kiln against PyTorch eager in the same run (issue 48's measurement).

For each family of --families (models/hf_families.py at its --real layer shapes: 2 layers, a 32000-token vocabulary,
random weights, in --dtype): the model is built on the GPU once; for each token count of --tokens, PyTorch eager's
forward is timed with the experts in transformers' batched_mm form (the form kiln's fixtures trace) and in its default
grouped_mm form (CUDA events around 20 calls after 3 warm-up calls, median of 3 such runs); the grouped_mm forward is
traced at that token count (its inputs recorded) and `kiln run T.pt --check --bench 20` runs on the trace: the check
against LibTorch on the same GPU (DESIGN.md's tolerances) and kiln's ms per forward (CUDA events, launched one by one
or from a CUDA graph, as kiln run's default). The floor is the bytes one forward must read (attention, router, shared
experts and, per layer, the experts at least one token chose, at most all of them; the embedding rows gathered; the LM
head) over --bandwidth. Prints a markdown table and writes OUT/moe_layers.json.

    python3 bench/moe_layers.py build/kiln --families mixtral,qwen3_moe --tokens 1,128 --out /tmp/moe

--compile adds torch.compile's figure (default mode, the grouped_mm form), --without PASS a second kiln run of the same
trace with that pass disabled (an A/B in one call), --profile kiln's per-kernel times in each run's log.
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
import hf_families  # noqa: E402
from hf_llama import example_inputs  # noqa: E402
from kiln_export import export  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def eager_ms(model, ids, experts):
    """Median over 3 runs of the mean ms of 20 forwards, with the experts in `experts`' form; None where PyTorch runs out
    of GPU memory (batched_mm copies each token's chosen experts' weights: 28 GB for Mixtral at 128 tokens)."""
    try:
        return timed_forward(model, ids, experts)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def compiled_ms(model, ids):
    """torch.compile (default mode) of the forward with the experts in grouped_mm form, timed as eager_ms; the error's
    first line instead where it fails."""
    try:
        model.config._experts_implementation = "grouped_mm"
        torch._dynamo.reset()
        return timed_forward(torch.compile(model), ids, "grouped_mm", config=model.config)
    except Exception as e:  # noqa: BLE001 -- recorded in the results, not hidden
        torch.cuda.empty_cache()
        return f"failed: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"


def timed_forward(model, ids, experts, config=None):
    (config or model.config)._experts_implementation = experts
    with torch.no_grad():
        for _ in range(3):
            model(ids)
        runs = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                model(ids)
            end.record()
            torch.cuda.synchronize()
            runs.append(start.elapsed_time(end) / 20)
    return sorted(runs)[1]


def floor_bytes(model, tokens, chosen):
    """Bytes one forward reads at the least: every weight outside the experts, the gathered embedding rows, and per
    layer min(tokens * chosen, experts) experts' weights (distinct experts; fewer if tokens share them)."""
    total = 0
    for name, p in model.named_parameters():
        size = p.numel() * p.element_size()
        if "embed_tokens" in name:
            total += tokens * p.shape[-1] * p.element_size()
        elif ".experts." in name and p.dim() >= 2:
            experts = p.shape[0]
            total += size * min(tokens * chosen, experts) // experts
        else:
            total += size
    return total


def kiln_run(kiln, trace, log, extra=()):
    t = time.time()
    r = subprocess.run([kiln, "run", str(trace), "--check", "--bench", "20", *extra], capture_output=True, text=True)
    log.write_text(r.stdout + r.stderr)
    ms = re.search(r"([0-9.]+) ms per forward \(CUDA events", r.stdout + r.stderr)
    rel = [float(x) for x in re.findall(r"rel_l2 ([0-9.e+-]+)", r.stdout)]
    return {"check": "PASS" if r.returncode == 0 and "check passed" in r.stdout else f"FAIL rc={r.returncode}",
            "kiln_ms": float(ms.group(1)) if ms else None, "rel_l2": max(rel) if rel else None,
            "kernels": int(m.group(1)) if (m := re.search(r"\((\d+) kernels", r.stdout)) else None,
            "run_s": round(time.time() - t, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kiln")
    ap.add_argument("--families", default="mixtral,qwen3_moe")
    ap.add_argument("--tokens", default="1,128")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--bandwidth", type=float, default=3.35e12, help="bytes per second for the floor (H100 SXM)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/kiln-moe"))
    ap.add_argument("--compile", action="store_true", help="also time torch.compile (default mode) of the grouped_mm form")
    ap.add_argument("--profile", action="store_true", help="kiln run --profile: each kernel's time, in the log")
    ap.add_argument("--without", metavar="PASS", help="also run kiln with --disable-pass PASS on the same trace (kiln_without_ms)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for family in a.families.split(","):
        model = hf_families.build(family, real=True).to(DTYPES[a.dtype]).to("cuda")
        config = hf_families.REAL[family]
        chosen = config.get("num_experts_per_tok", 1)
        for tokens in (int(t) for t in a.tokens.split(",")):
            inputs = {k: v.to("cuda") for k, v in example_inputs(config["vocab_size"], seq=tokens).items()}
            row = {"family": family, "dtype": a.dtype, "tokens": tokens,
                   "eager_batched_ms": eager_ms(model.model, inputs["input_ids"], "batched_mm"),
                   "eager_grouped_ms": eager_ms(model.model, inputs["input_ids"], "grouped_mm")}
            # traced in the default grouped_mm form: batched_mm's repeat_interleave fails to trace on the GPU (its
            # traced repeat count lands on the CPU); kiln lowers both forms to the same gathered products
            model.model.config._experts_implementation = "grouped_mm"
            trace = a.out / f"{family}_{tokens}.pt"
            export(model, inputs, trace)
            if a.compile:
                row["compile_ms"] = compiled_ms(model.model, inputs["input_ids"])
            row.update(kiln_run(a.kiln, trace, a.out / f"{family}_{tokens}.log", ["--profile"] if a.profile else []))
            if a.without:
                off = kiln_run(a.kiln, trace, a.out / f"{family}_{tokens}_without.log", ["--disable-pass", a.without])
                row.update({"without": a.without, "kiln_without_ms": off["kiln_ms"], "check_without": off["check"]})
            trace.unlink()
            row["floor_ms"] = floor_bytes(model, tokens, chosen) / a.bandwidth * 1e3
            rows.append(row)
            print(json.dumps(row), flush=True)
            (a.out / "moe_layers.json").write_text(json.dumps(rows, indent=1))
        del model
        torch.cuda.empty_cache()
    print("| model | tokens | check | kiln ms | kiln without ms | eager batched_mm ms | eager grouped_mm ms | torch.compile ms "
          "| floor ms | kernels |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
        print(f"| {r['family']} {r['dtype']} | {r['tokens']} | {r['check']} | {fmt(r['kiln_ms'])} | "
              f"{fmt(r.get('kiln_without_ms'))} | {fmt(r['eager_batched_ms'])} | {fmt(r['eager_grouped_ms'])} | "
              f"{fmt(r.get('compile_ms'))} | {fmt(r['floor_ms'])} | {r['kernels']} |")


if __name__ == "__main__":
    main()
