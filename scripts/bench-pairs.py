#!/usr/bin/env python3
"""Run a Google Benchmark executable and print coverse-vs-baseline pairs as a Markdown table.

Benchmarks pair up when their names differ in exactly one `/`-separated part, which is
`coverse` on one side and any other word on the other (the baseline: `asio`, `malloc`, ...):

    resume_ready/child/coverse   vs  resume_ready/child/asio
    alloc_free/1024/coverse      vs  alloc_free/1024/malloc

Arguments this script does not know are passed to the executable, e.g.

    scripts/bench-pairs.py build/release/tools/bench/bench_runtime \\
        --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

With repetitions, the median is compared (see --statistic). The ratio is coverse time over
baseline time: below 1 means coverse is faster. Benchmarks without a partner are listed too.
Standard library only.
"""

import argparse
import json
import statistics
import subprocess
import sys

COVERSE = "coverse"
NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__,
        allow_abbrev=False,
        epilog="Any other argument (e.g. --benchmark_filter=..., --benchmark_repetitions=3) "
        "is passed to the benchmark executable.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("binary", nargs="?", help="Google Benchmark executable to run")
    p.add_argument(
        "--input",
        metavar="JSON",
        help="read results from this --benchmark_format=json output instead of running a binary",
    )
    p.add_argument(
        "--time",
        choices=("auto", "real", "cpu"),
        default="auto",
        help="which time to compare. auto (default): real time for benchmarks registered "
        "with UseRealTime (a `real_time` name part), CPU time otherwise, which is also what "
        "Google Benchmark computes items/s from",
    )
    p.add_argument(
        "--statistic",
        choices=("median", "mean", "min"),
        default="median",
        help="how repetitions are combined (default: median)",
    )
    args, passthrough = p.parse_known_args()
    if bool(args.binary) == bool(args.input):
        p.error("give either a benchmark executable or --input JSON")
    if args.input and passthrough:
        p.error("extra arguments %s only make sense when running a binary" % " ".join(passthrough))
    return args, passthrough


def load_results(args, passthrough):
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            return json.load(f)
    cmd = [args.binary, "--benchmark_format=json"] + passthrough
    try:
        # stderr (the library's warnings, our labels' complaints) goes straight through.
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, check=False, text=True)
    except OSError as e:
        sys.exit("bench-pairs: cannot run %s: %s" % (args.binary, e))
    if proc.returncode != 0:
        sys.exit("bench-pairs: %s exited with status %d" % (" ".join(cmd), proc.returncode))
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        sys.exit("bench-pairs: %s did not print JSON (%s); is it a Google Benchmark binary?"
                 % (args.binary, e))


class Result:
    def __init__(self, name):
        self.name = name
        self.ns = None
        self.items_per_second = None
        self.error = None
        self.repetitions = 0


def time_key(name, choice):
    if choice == "auto":
        choice = "real" if "real_time" in name.split("/") else "cpu"
    return choice + "_time"


def collect(data, time_choice, statistic):
    """One Result per run name: the chosen aggregate if the binary reported it, else the
    statistic computed over the repetitions it printed."""
    runs = {}  # run name -> list of (ns, items/s)
    aggregates = {}  # run name -> (ns, items/s)
    errors = {}
    order = []
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if name not in runs:
            runs[name] = []
            order.append(name)
        if b.get("error_occurred"):
            errors[name] = b.get("error_message", "error")
            continue
        ns = b[time_key(name, time_choice)] * NS_PER_UNIT[b.get("time_unit", "ns")]
        ips = b.get("items_per_second")
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == statistic:
                aggregates[name] = (ns, ips)
        else:
            runs[name].append((ns, ips))

    combine = {"median": statistics.median, "mean": statistics.mean, "min": min}[statistic]
    results = {}
    for name in order:
        r = Result(name)
        r.repetitions = len(runs[name])
        if name in errors:
            r.error = errors[name]
        elif name in aggregates:
            r.ns, r.items_per_second = aggregates[name]
        elif runs[name]:
            r.ns = combine([ns for ns, _ in runs[name]])
            rates = [ips for _, ips in runs[name] if ips is not None]
            r.items_per_second = combine(rates) if rates else None
        else:
            r.error = "no %s in the output (use --statistic median or mean)" % statistic
        results[name] = r
    return results, order


def pair(order):
    """Yields (label, coverse name or None, baseline name or None) rows, in the binary's
    order: every coverse benchmark with each of its baselines, then anything unpaired."""
    parts = {name: name.split("/") for name in order}
    paired = set()
    rows = []
    for name in order:
        p = parts[name]
        if COVERSE not in p:
            continue
        i = p.index(COVERSE)
        label = "/".join(p[:i] + p[i + 1:])
        partners = [
            other
            for other in order
            if other != name
            and len(parts[other]) == len(p)
            and parts[other][i] != COVERSE
            and parts[other][:i] == p[:i]
            and parts[other][i + 1:] == p[i + 1:]
        ]
        paired.add(name)
        paired.update(partners)
        if not partners:
            rows.append((label, name, None))
        for other in partners:
            rows.append((label, name, other))
    for name in order:
        if name not in paired:
            rows.append((name, None, name))
    return rows


def fmt_ns(r):
    if r is None:
        return "—"
    if r.error:
        return "error: " + r.error
    return "{:,.1f}".format(r.ns)


def fmt_rate(r):
    if r is None or r.error or r.items_per_second is None:
        return "—"
    v = r.items_per_second
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return "{:.2f}{}/s".format(v / scale, suffix)
    return "{:.1f}/s".format(v)


def baseline_word(coverse_name, baseline_name):
    if coverse_name is None:
        return baseline_name
    i = coverse_name.split("/").index(COVERSE)
    return baseline_name.split("/")[i]


def main():
    args, passthrough = parse_args()
    data = load_results(args, passthrough)
    results, order = collect(data, args.time, args.statistic)
    if not results:
        sys.exit("bench-pairs: no benchmarks in the output (check --benchmark_filter)")

    print("| benchmark | coverse ns | baseline | baseline ns | ratio | coverse items/s "
          "| baseline items/s |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for label, cname, bname in pair(order):
        c = results[cname] if cname else None
        b = results[bname] if bname else None
        ratio = "—"
        if c and b and c.ns is not None and b.ns is not None and b.ns > 0:
            r = c.ns / b.ns
            ratio = "{:.2f}".format(r) if r >= 0.1 else "{:.3f}".format(r)
        print("| {} | {} | {} | {} | {} | {} | {} |".format(
            label, fmt_ns(c), baseline_word(cname, bname) if bname else "—", fmt_ns(b), ratio,
            fmt_rate(c), fmt_rate(b)))

    reps = max(r.repetitions for r in results.values())
    how = ("%s of %d repetitions" % (args.statistic, reps)) if reps > 1 else "one run"
    if any(r.repetitions == 0 and not r.error for r in results.values()):
        how = "%s (aggregates reported by the binary)" % args.statistic
    print()
    which = {
        "auto": "CPU time (real time for `real_time` benchmarks)",
        "real": "real time",
        "cpu": "CPU time",
    }[args.time]
    print("Times are %s per iteration in ns, %s; ratio = coverse / baseline (below 1: "
          "coverse is faster)." % (which, how))


if __name__ == "__main__":
    main()
