"""kiln generate --interpret against transformers' model.generate (issue 42): tiny random-weight decoder-step traces
made by models/hf_decode.py (Llama, Qwen2, Phi-3, Gemma; Gemma-2 through the hybrid cache), 16 new tokens each.

f32: the ids must equal model.generate(do_sample=False)'s exactly, token by token through the decode step and with the
prompt in chunks (--prefill-chunk). bf16: kiln's ids are fed back to the model without a cache (teacher forcing) and
the logits kiln chose each token from are judged by DESIGN.md's bf16 rule: against an f32 evaluation of the same
rounded weights, kiln's error at most 1.5 x the bf16 model's own + 1e-3. Last, the f32 Llama over a cache of 256 for 150
new tokens (attention's key steps past the position skipped at run time).

    python3 tests/decode/generate_check.py build/kiln [FAMILY ...]
    python3 tests/decode/generate_check.py build/kiln --gpu [FAMILY ...]   # kiln on the GPU (scripts/device_decode.sh)
"""
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "models"))
import hf_decode  # noqa: E402

PROMPT = [5, 17, 42, 9, 100, 3, 77]
NEW = 16
CACHE = 32


WHERE = ["--interpret"]  # --gpu: []


def kiln_generate(kiln, trace, extra=(), new=NEW):
    cmd = [kiln, "generate", str(trace), *WHERE, "--prompt-ids", ",".join(map(str, PROMPT)),
           "--max-new-tokens", str(new), *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {run.returncode}: {run.stderr.strip()}")
    if not WHERE:  # on the GPU: what the forwards took
        print("  " + run.stderr.strip().splitlines()[-1])
    return [int(x) for x in run.stdout.strip().split(",")]


def check_f32(kiln, family, tmp):
    model = hf_decode.build(family, "f32")
    trace = tmp / f"{family}_step.pt"
    hf_decode.trace(model, CACHE, 1, trace, hybrid=family in hf_decode.HYBRID)
    want = hf_decode.generate(hf_decode.build(family, "f32"), PROMPT, NEW)
    ok = True
    for extra in ([], ["--prefill-chunk", "4"]):
        got = kiln_generate(kiln, trace, extra)
        same = got == want
        ok = ok and same
        print(f"{family} f32 {' '.join(extra) or 'token by token'}: {'PASS' if same else 'FAIL'}"
              + ("" if same else f"\n  kiln         {got}\n  transformers {want}"))
    return ok


def check_long(kiln, tmp):
    """Llama over a cache of 256 for 150 new tokens: attention walks 1, 2 and then 3 steps of 64 keys (the steps past
    the position skipped at run time), and must give transformers' ids throughout."""
    trace = tmp / "llama_long_step.pt"
    hf_decode.trace(hf_decode.build("llama", "f32"), 256, 1, trace)
    want = hf_decode.generate(hf_decode.build("llama", "f32"), PROMPT, 150)
    got = kiln_generate(kiln, trace, [], 150)
    same = got == want
    print(f"llama f32, cache 256, 150 new tokens: {'PASS' if same else 'FAIL'}"
          + ("" if same else f"\n  kiln         {got}\n  transformers {want}"))
    return same


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_bf16(kiln, family, tmp):
    model = hf_decode.build(family, "bf16")
    trace = tmp / f"{family}_step_bf16.pt"
    hf_decode.trace(model, CACHE, 1, trace)
    logits_dir = tmp / f"{family}_logits"
    got = kiln_generate(kiln, trace, ["--prefill-chunk", "4", "--save-logits", str(logits_dir)])
    bf16 = hf_decode.logits_along(hf_decode.build(family, "bf16"), got[:-1])
    f32 = hf_decode.logits_along(hf_decode.build(family, "bf16").float(), got[:-1])
    ok = True
    worst = 0.0
    for i in range(NEW):
        at = len(PROMPT) - 1 + i
        mine = np.fromfile(logits_dir / f"logits{i}.bin", dtype=np.float32)
        kiln_err = rel_l2(mine, f32[at].numpy())
        torch_err = rel_l2(bf16[at].numpy(), f32[at].numpy())
        bound = 1.5 * torch_err + 1e-3
        worst = max(worst, kiln_err / bound)
        if not kiln_err <= bound:
            ok = False
            print(f"  step {i}: kiln rel_l2 {kiln_err:.3e} vs f32, LibTorch bf16 {torch_err:.3e} (bound {bound:.3e}) FAIL")
    print(f"{family} bf16 logits of {NEW} steps against f32: {'PASS' if ok else 'FAIL'} (worst {worst:.2f} of the bound)")
    return ok


def main():
    kiln = sys.argv[1]
    families = [a for a in sys.argv[2:] if a != "--gpu"] or ["llama", "qwen2", "phi3", "gemma", "gemma2"]
    if "--gpu" in sys.argv[2:]:
        WHERE.clear()
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        for family in families:
            ok = check_f32(kiln, family, tmp) and ok
        ok = check_bf16(kiln, "llama", tmp) and ok
        ok = check_long(kiln, tmp) and ok
    print("generate: PASS" if ok else "generate: FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
