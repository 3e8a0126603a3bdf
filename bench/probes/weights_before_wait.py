#!/usr/bin/env python3
"""Probe: does a product kernel gain from reading its weights before griddepcontrol.wait?

Every kiln kernel on sm_90 waits for the kernels before it at its very first line (kernel-overlap-launches), so a
programmatic launch hides only the launch itself. A matrix product's weights are never written by a forward: its
first copies of them could start while the kernel before it still drains. This probe patches the emitted CUDA of
one-warpgroup TMA products (no producer warp) by hand and times each variant with `kiln run DIR --bench`:

  base   as emitted
  fill   thread 0 issues the ring fill's weight copies, then waits, then the activations' copies
  l2     fill, and before the wait an L2 prefetch (cp.async.bulk.prefetch.tensor) of every later weight slice
  early  l2, and the next kernel allowed to launch once the block's main loop is done (before the epilogue)

Usage (GPU machine, kiln built): weights_before_wait.py KILN CASE.pt... --out DIR
Prints one line per case and variant: hot and rotated microseconds per forward; `--check` on every variant.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

WAIT = "  kiln::wait_prior_grids();  // the kernels launched before this one have completed\n"
LAUNCH = "  kiln::launch_dependent_grids();  // the next kernel may launch once every block is here\n"


def patch(src: str, variant: str) -> str:
    if variant == "base":
        return src
    if WAIT not in src:
        raise ValueError("no wait at the top")
    lines = src.splitlines(keepends=True)
    # The ring fill: the first thread-0 block that arms mbarriers.
    start = next(i for i, l in enumerate(lines) if l == "  if (threadIdx.x < 1) {\n" and "mbarrier_arrive_expect_tx" in lines[i + 1])
    end = next(i for i in range(start, len(lines)) if lines[i] == "  }\n")
    body = lines[start + 1:end]
    weights = [l for l in body if "&tmap1," in l]
    arms = [l for l in body if "mbarrier_arrive_expect_tx" in l]
    acts = [l for l in body if "&tmap0," in l]
    if len(weights) + len(arms) + len(acts) != len(body) or not weights:
        raise ValueError("unexpected ring fill")
    pre = arms + weights
    if variant in ("l2", "early"):
        slices = int(re.search(r"for \(int k0 = 0; k0 < (\d+); k0 \+= (\d+)\)", src).group(1)) // int(
            re.search(r"for \(int k0 = 0; k0 < (\d+); k0 \+= (\d+)\)", src).group(2))
        second = weights[1]
        m = re.search(r"&tmap1, (.*), (.*), &full\[1\]\);", second)
        x, y = m.group(1), m.group(2)
        if "(k_first + 1)" not in x:
            raise ValueError("unexpected weight coordinate " + x)
        for s in range(len(weights), slices):
            xs = x.replace("(k_first + 1)", f"(k_first + {s})")
            pre.append(f'    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {{%1, %2}}];" :: '
                       f'"l"(reinterpret_cast<unsigned long long>(&tmap1)), "r"({xs}), "r"({y}) : "memory");\n')
    lines[start + 1:end] = pre + ["    kiln::wait_prior_grids();\n"] + acts
    out = "".join(lines).replace(WAIT, "  if (threadIdx.x != 0) kiln::wait_prior_grids();\n")
    if variant == "early":
        drain = "  kiln::wgmma_wait_group<0>();\n"
        if drain not in out or LAUNCH not in out:
            raise ValueError("no main loop end")
        out = out.replace(LAUNCH, "").replace(drain, drain + LAUNCH, 1)
    return out


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def micros(text: str) -> str:
    m = re.search(r"([0-9.]+) (ms|us) per forward", text)
    if not m:
        return "?"
    v = float(m.group(1)) * (1000 if m.group(2) == "ms" else 1)
    return f"{v:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=400)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "weights_before_wait.log", "w")
    for case in a.cases:
        name = Path(case).name.replace(".pt", "")
        base = out / name / "base"
        r = run([a.kiln, "compile", case, "--emit", "cuda", "-o", str(base)])
        log.write(r.stdout + r.stderr)
        for variant in ("base", "fill", "l2", "early"):
            d = out / name / variant
            if variant != "base":
                shutil.rmtree(d, ignore_errors=True)
                shutil.copytree(base, d)
                manifest = json.loads((d / "manifest.json").read_text())
                try:
                    for k in manifest["kernels"]:
                        cu = d / (Path(k["cubin"]).stem + ".cu")
                        src = cu.read_text()
                        if "tiled" not in src and "wgmma" not in src:
                            continue
                        cu.write_text(patch(src, variant))
                        r = run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-o", k["cubin"], cu.name], cwd=d)
                        if r.returncode:
                            raise ValueError(r.stderr[-2000:])
                except (ValueError, StopIteration, AttributeError) as e:
                    print(f"{name} {variant}: not patched ({str(e)[:200]})", flush=True)
                    continue
                manifest["files"] = [f for f in manifest["files"] if not f["name"].endswith(".cubin")]
                (d / "manifest.json").write_text(json.dumps(manifest, indent=2))
            check = run([a.kiln, "run", str(d), "--reference", case, "--check"])
            hot = run([a.kiln, "run", str(d), "--bench", str(a.iters)])
            rot = run([a.kiln, "run", str(d), "--bench", str(a.iters), "--rotate-mb", "300"])
            for r in (check, hot, rot):
                log.write(f"== {name} {variant}\n{r.stdout}{r.stderr}\n")
            ok = "PASS" if check.returncode == 0 and "PASS" in check.stdout + check.stderr else "FAIL"
            print(f"{name:40s} {variant:6s} {ok}  hot {micros(hot.stdout + hot.stderr):>7s}  rot {micros(rot.stdout + rot.stderr):>7s}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
