"""Where a kernel's warps wait, from Nsight Compute's source page (`ncu --import R --page source --csv --print-source sass`).

    python3 bench/stall_hotspots.py SOURCE.csv [--top N]

Prints the share of the sampled warp stalls per opcode and the N instructions (address, SASS) where most samples fell,
with the instruction before each (what it waits for is usually just above it). Columns are found by name, so minor
changes in ncu's layout do not matter; the file is printed unchanged to stderr in part when none is found.
"""
import argparse
import collections
import csv
import sys


def column(header, *words):
    for i, name in enumerate(header):
        if all(w.lower() in name.lower() for w in words):
            return i
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=24)
    a = ap.parse_args(argv)
    rows = list(csv.reader(open(a.csv, newline="", errors="replace")))
    start = next((i for i, r in enumerate(rows) if column(r, "source") is not None and column(r, "stall", "all") is not None), None)
    if start is None:
        sys.stderr.write("no source/stall columns in %s; its start:\n%s\n" % (a.csv, "\n".join(",".join(r) for r in rows[:5])))
        return 1
    header = rows[start]
    src, stall = column(header, "source"), column(header, "stall", "all")
    addr = column(header, "address")
    body = [r for r in rows[start + 1:] if len(r) > max(src, stall)]

    def samples(r):
        try:
            return float(r[stall] or 0)
        except ValueError:
            return 0.0

    total = sum(samples(r) for r in body) or 1.0
    by_op = collections.Counter()
    for r in body:
        by_op[r[src].strip().split(" ")[0].lstrip("@!P0123456789T ").split(".")[0] or "?"] += samples(r)
    print(f"sampled stalls: {total:.0f}; by opcode: " + ", ".join(f"{op} {100 * n / total:.1f}%" for op, n in by_op.most_common(12)))
    ranked = sorted(range(len(body)), key=lambda i: -samples(body[i]))[: a.top]
    for i in sorted(ranked):
        r = body[i]
        before = body[i - 1][src].strip() if i > 0 else ""
        where = r[addr] if addr is not None else str(i)
        print(f"{100 * samples(r) / total:5.1f}%  {where:>6}  {r[src].strip()[:70]:70}  | after {before[:50]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
