#!/usr/bin/env python3
"""Variants of kiln's emitted wgmma product kernels, for timing on the GPU what their main loop spends where.

Takes a directory written by `kiln compile --emit cuda` and writes, per variant, a copy of it (weights hard-linked)
whose wgmma product kernels (those with a cp.async ring and wgmma in their k loop) are rewritten, compiled with nvcc
as kiln compiles them, and dropped from the manifest's file list (so the runtime loads the edited cubins):

  base     unchanged (recompiled, so every variant is built the same way)
  nocopy   the k loop issues no copies: the multiply runs on whatever the prologue left in the ring (wrong values;
           the time of the tensor cores, barriers and waits without the memory stream)
  nomma    the k loop issues no wgmma (zeros out): the time of the memory stream alone
  inflight one wgmma group left in flight across the barrier (wait_group 1 in the loop, 0 after it); to keep that
           safe, the copies run depth - 2 slices ahead instead of depth - 1 (correct values: check it)

Only for measuring: the text edits assume the shape of today's emitted code and fail loudly when it differs.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def is_wgmma_product(src):
    return "wgmma.mma_async" in src and "kiln::cp_async_commit();" in src and "for (int k0 = 0;" in src


def block_end(text, start):
    """Where the line ends that closes the first braced body after `start` (braces balanced)."""
    depth, i = 0, text.index("{", start)
    while True:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text.index("\n", i) + 1
        i += 1


def split_loop(src):
    """(before the k loop, the loop's text through its closing brace, after)."""
    start = src.index("  for (int k0 = 0;")
    end = block_end(src, start)
    return src[:start], src[start:end], src[end:]


def drop_block(text, head):
    """Removes the statement starting at the line `head` (an if with a braced body), braces balanced."""
    start = text.index(head)
    line_start = text.rindex("\n", 0, start) + 1
    return text[:line_start] + text[block_end(text, start):]


def ring_depth(prologue):
    return prologue.count("kiln::cp_async_commit();") + 1


def nocopy(src):
    pre, loop, post = split_loop(src)
    head = re.search(r"    if \(k0 \+ \d+ < \d+\) \{", loop)
    if not head:
        raise ValueError("no copy block in the k loop")
    return pre + drop_block(loop, head.group(0)) + post


def nomma(src):
    pre, loop, post = split_loop(src)
    lines, out, skipping = loop.split("\n"), [], False
    for line in lines:
        if line.startswith("    asm volatile(") and "wgmma" in "".join(lines[lines.index(line):lines.index(line) + 2]):
            skipping = True
        if not skipping:
            out.append(line)
        elif line.rstrip().endswith(");"):
            skipping = False
    loop2 = "\n".join(out)
    if "wgmma.mma_async" in loop2 or loop2 == loop:
        raise ValueError("could not remove the wgmma statements")
    return pre + loop2 + post


def inflight(src):
    pre, loop, post = split_loop(src)
    d = ring_depth(pre)
    if d < 3:
        raise ValueError(f"ring depth {d}: needs 3 or more")
    # The prologue's last group (slice d - 2) goes: the loop now copies slice i + d - 2.
    commits = [m.start() for m in re.finditer(r"  kiln::cp_async_commit\(\);\n", pre)]
    last_end = pre.index("\n", commits[-1]) + 1
    prev_end = pre.index("\n", commits[-2]) + 1
    pre = pre[:prev_end] + pre[last_end:]
    tk = int(re.search(r"k0 \+= (\d+)", loop).group(1))
    new = loop.replace(f"kiln::cp_async_wait<{d - 2}>();", f"kiln::cp_async_wait<{d - 3}>();")
    new = re.sub(rf"if \(k0 \+ {(d - 1) * tk} < ", f"if (k0 + {(d - 2) * tk} < ", new)
    new = new.replace(f"(k0 / {tk} + {d - 1}) % {d}", f"(k0 / {tk} + {d - 2}) % {d}")
    new = re.sub(rf"\(k0 / {tk} \+ k_first \+ {d - 1}\)", f"(k0 / {tk} + k_first + {d - 2})", new)
    new = re.sub(rf"\(k0 / {tk} \+ {d - 1}\)(?! %)", f"(k0 / {tk} + {d - 2})", new)
    new = new.replace("kiln::wgmma_wait_group<0>();", "kiln::wgmma_wait_group<1>();")
    if new.count("wgmma_wait_group<1>") != 1 or f"+ {d - 1})" in new.split("kiln::cp_async_commit();")[0]:
        raise ValueError("unexpected k loop shape")
    post = post.replace("  kiln::cp_async_wait<0>();", "  kiln::wgmma_wait_group<0>();\n  kiln::cp_async_wait<0>();", 1)
    return pre + new + post


VARIANTS = {"base": lambda s: s, "nocopy": nocopy, "nomma": nomma, "inflight": inflight}


def make_variant(src_dir, out_dir, name, only):
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for f in src_dir.iterdir():
        if f.name == "weights.bin":
            os.link(f, out_dir / f.name)
        elif f.is_file():
            shutil.copy2(f, out_dir / f.name)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    changed = []
    for k in manifest["kernels"]:
        cu = out_dir / k["source"]
        src = cu.read_text()
        if not is_wgmma_product(src) or (only and not re.search(only, k["name"])) or cu.name in changed:
            continue
        cu.write_text(VARIANTS[name](src))
        changed.append(cu.name)
    if changed:
        subprocess.run(["nvcc", "-cubin", f"-arch={manifest['arch']}", "-O3", "-std=c++17", "--output-directory", "."] + changed,
                       cwd=out_dir, check=True)
    cubins = {Path(c).with_suffix(".cubin").name for c in changed}
    manifest["files"] = [f for f in manifest.get("files", []) if f.get("name", f.get("path")) not in cubins]
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return changed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("emitted", type=Path)
    ap.add_argument("out", type=Path, help="variants go to OUT/<variant>")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--only", default="", help="regex: edit only the kernels whose name matches")
    a = ap.parse_args()
    for v in a.variants.split(","):
        changed = make_variant(a.emitted, a.out / v, v, a.only)
        print(f"{v}: {len(changed)} kernels edited: {' '.join(changed)}")


if __name__ == "__main__":
    sys.exit(main())
