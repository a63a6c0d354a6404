#!/usr/bin/env python3
"""Compares coverse-perf with mpi_perf from the JSON lines scripts/bench-perf.sh writes: per
test and size, the median over the repetitions of each implementation, its spread, and the
ratio coverse / Open MPI. Prints a Markdown table, then the small-message latency target.

Usage: scripts/bench-perf-table.py RESULTS.jsonl
"""
import json
import statistics
import sys

# test -> (field, unit, which way is better)
METRICS = {
    "pingpong": ("p50_us", "µs one-way p50", "lower"),
    "bw": ("mbps", "MB/s", "higher"),
    "rate": ("msgs_per_s", "msg/s", "higher"),
    "bcast": ("lat_us", "µs", "lower"),
    "barrier": ("lat_us", "µs", "lower"),
}
OURS, THEIRS = "coverse", "mpi"
SMALL = 1024            # pingpong sizes up to here are "small messages"
TARGET = 0.8            # small-message latency: coverse at most 0.8x Open MPI TCP's


def size_text(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def value_text(v, unit):
    if v is None:
        return "—"
    return f"{v:.2f}" if unit.startswith("µs") else f"{v:,.0f}"


def main(path):
    samples = {}  # (test, bytes) -> impl -> [values]
    order = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"bench-perf-table: {path} line {n} is not JSON: {e}")
            test = r.get("test")
            if test not in METRICS or METRICS[test][0] not in r:
                continue
            key = (test, r.get("bytes", 0))
            if key not in samples:
                samples[key] = {}
                order.append(key)
            samples[key].setdefault(r.get("impl", "?"), []).append(r[METRICS[test][0]])
    if not samples:
        sys.exit(f"bench-perf-table: no results in {path}")

    def median(vals):
        return statistics.median(vals) if vals else None

    def spread(vals):
        m = median(vals)
        if not vals or len(vals) < 2 or not m:
            return "—"
        return f"±{(max(vals) - min(vals)) / 2 / m * 100:.0f}%"

    print(f"| test | size | metric | coverse | spread | Open MPI TCP | spread | coverse/OMPI | better |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    small = []
    for key in order:
        test, nbytes = key
        field, unit, better = METRICS[test]
        ours, theirs = samples[key].get(OURS, []), samples[key].get(THEIRS, [])
        mo, mt = median(ours), median(theirs)
        ratio = mo / mt if mo is not None and mt else None
        if test == "pingpong" and nbytes <= SMALL and ratio is not None:
            small.append((nbytes, ratio))
        print(f"| {test} | {size_text(nbytes) if test != 'barrier' else '—'} | {unit} "
              f"| {value_text(mo, unit)} | {spread(ours)} | {value_text(mt, unit)} "
              f"| {spread(theirs)} | {f'{ratio:.2f}' if ratio is not None else '—'} | {better} |")

    reps = max(len(v) for s in samples.values() for v in s.values())
    print(f"\nMedians of {reps} repetitions; spread is half the range over the median. "
          f"Ratios below 1 are better for latency, above 1 for MB/s and msg/s.")
    if small:
        worst = max(r for _, r in small)
        verdict = "met" if worst <= TARGET else "missed"
        sizes = ", ".join(f"{size_text(b)} {r:.2f}" for b, r in small)
        print(f"Small-message latency, coverse / Open MPI TCP (p50): {sizes}; "
              f"target at most {TARGET:.2f} at every size up to {size_text(SMALL)}: {verdict}.")
    elif any(t == "pingpong" for t, _ in order):
        print("No small-message pingpong pair to compare (one implementation is missing).")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stdout if len(sys.argv) == 2 else sys.stderr)
        sys.exit(0 if len(sys.argv) == 2 else 2)
    main(sys.argv[1])
