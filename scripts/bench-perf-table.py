#!/usr/bin/env python3
"""Compares coverse with its peers from the JSON lines scripts/bench-perf.sh writes: per test
and size, the median over the repetitions of each implementation (a column each, with its
spread), the ratios issue 10's targets use, then one pass/miss line per target. Prints
Markdown. With --svg FILE, also plots bandwidth and one-way latency against size (log-log,
one line per implementation), written by hand: no plotting library needed.

Implementations: coverse-shm, coverse-tcp, ompi-vader, ompi-tcp, ucx-shm, ucx-tcp, pvr (raw
process_vm_readv), ring (coverse's shared-memory ring alone), line (no ring: the same messages
through one fixed place each way, the floor under any layer), tcpline (the same ping-pong over
bare loopback TCP, the floor under any layer over TCP); the older files' "coverse" and "mpi"
read as coverse-shm and ompi-tcp.

Usage: scripts/bench-perf-table.py [--svg FILE] RESULTS.jsonl
"""
import argparse
import json
import math
import statistics
import sys

# test -> (field, unit, which way is better)
METRICS = {
    "pingpong": ("p50_us", "µs one-way p50", "lower"),
    "bw": ("mbps", "MB/s", "higher"),
    "rate": ("msgs_per_s", "msg/s", "higher"),
    "get": ("p50_us", "µs one read p50", "lower"),
    "bcast": ("lat_us", "µs", "lower"),
    "barrier": ("lat_us", "µs", "lower"),
}
IMPLS = ["coverse-shm", "coverse-tcp", "ompi-vader", "ompi-tcp", "ucx-shm", "ucx-tcp", "pvr",
         "ring", "line", "tcpline"]
LEGACY = {"coverse": "coverse-shm", "mpi": "ompi-tcp"}

# (column, ours, peers): ours / the best of the peers (the lowest latency, the highest MB/s).
RATIOS = [
    ("shm/vader", "coverse-shm", ("ompi-vader",)),
    ("shm/pvr", "coverse-shm", ("pvr",)),
    ("shm/ring", "coverse-shm", ("ring",)),
    # Not ours over a peer: the floor over vader, the least a same-host ratio can be.
    ("line/vader", "line", ("ompi-vader",)),
    ("tcp/ompi-tcp", "coverse-tcp", ("ompi-tcp",)),
    ("tcp/best(ompi-tcp,ucx-tcp)", "coverse-tcp", ("ompi-tcp", "ucx-tcp")),
    # Issue 11's TCP target's ratio, beside the floor's below it.
    ("tcp/ucx-tcp", "coverse-tcp", ("ucx-tcp",)),
    # The same for TCP: the bare loopback exchange over UCX's, the least tcp/ucx-tcp can be.
    ("tcpline/ucx-tcp", "tcpline", ("ucx-tcp",)),
]

MiB = 1 << 20
# Issues 10 and 11: (what, test, bytes, ours, peers, ">=" or "<=", bound)
TARGETS = [
    ("same-host 1 MiB bandwidth vs Open MPI vader", "bw", MiB, "coverse-shm", ("ompi-vader",),
     ">=", 1.1),
    ("same-host 4 MiB bandwidth vs Open MPI vader", "bw", 4 * MiB, "coverse-shm",
     ("ompi-vader",), ">=", 1.1),
    ("same-host 1 MiB bandwidth vs raw process_vm_readv", "bw", MiB, "coverse-shm", ("pvr",),
     ">=", 0.95),
    ("same-host 4 MiB bandwidth vs raw process_vm_readv", "bw", 4 * MiB, "coverse-shm", ("pvr",),
     ">=", 0.95),
    ("same-host 1 MiB one-way latency vs Open MPI vader", "pingpong", MiB, "coverse-shm",
     ("ompi-vader",), "<=", 0.9),
    ("TCP 1 MiB bandwidth vs the better of Open MPI TCP and UCX TCP", "bw", MiB, "coverse-tcp",
     ("ompi-tcp", "ucx-tcp"), ">=", 1.2),
    ("TCP 1 MiB one-way latency vs Open MPI TCP", "pingpong", MiB, "coverse-tcp", ("ompi-tcp",),
     "<=", 1.0),
    # Issue 11 (eager channels)
    ("same-host 8 B one-way latency vs Open MPI vader", "pingpong", 8, "coverse-shm",
     ("ompi-vader",), "<=", 0.8),
    ("same-host 1 KiB one-way latency vs Open MPI vader", "pingpong", 1024, "coverse-shm",
     ("ompi-vader",), "<=", 0.8),
    ("same-host 8 B message rate vs Open MPI vader", "rate", 8, "coverse-shm", ("ompi-vader",),
     ">=", 1.5),
    ("TCP 8 B one-way latency vs UCX TCP", "pingpong", 8, "coverse-tcp", ("ucx-tcp",), "<=", 0.9),
]
# A target's implementation -> the floor under it and what that floor is: a latency target of
# coverse-tcp also says how the floor stands against the same peers (the least any layer could
# reach), when the file has the floor's result at that size.
FLOORS = {"coverse-tcp": ("tcpline", "the bare TCP exchange")}
SMALL = 1024  # issue 5: same-host small-message latency at most 0.8x Open MPI TCP's
SMALL_TARGET = 0.8

COLORS = {
    "coverse-shm": "#d62728", "coverse-tcp": "#ff7f0e", "ompi-vader": "#1f77b4",
    "ompi-tcp": "#17becf", "ucx-shm": "#2ca02c", "ucx-tcp": "#9acd32", "pvr": "#555555",
    "ring": "#8c564b", "line": "#bcbd22", "tcpline": "#9467bd",
}


def size_text(n):
    if n >= MiB and n % MiB == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def value_text(v, unit):
    if v is None:
        return "—"
    if unit.startswith("µs"):
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return f"{v:,.0f}"


def load(path):
    samples = {}  # (test, bytes) -> impl -> [values]
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
            impl = r.get("impl", "?")
            impl = LEGACY.get(impl, impl)
            samples.setdefault((test, r.get("bytes", 0)), {}).setdefault(impl, []).append(
                r[METRICS[test][0]])
    if not samples:
        sys.exit(f"bench-perf-table: no results in {path}")
    return samples


def median(vals):
    return statistics.median(vals) if vals else None


def spread(vals):
    m = median(vals)
    if not vals or len(vals) < 2 or not m:
        return ""
    return f" ±{(max(vals) - min(vals)) / 2 / m * 100:.0f}%"


def ratio(by_impl, test, ours, peers):
    """ours / the best peer's median, or None when any of them is missing."""
    mo = median(by_impl.get(ours, []))
    mp = [median(by_impl.get(p, [])) for p in peers]
    if mo is None or any(m is None or m == 0 for m in mp):
        return None
    best = min(mp) if METRICS[test][2] == "lower" else max(mp)
    return mo / best


def test_order(key):
    order = list(METRICS)
    return (order.index(key[0]), key[1])


def table(samples):
    keys = sorted(samples, key=test_order)
    present = {i for s in samples.values() for i in s}
    impls = [i for i in IMPLS if i in present] + sorted(present - set(IMPLS))
    ratios = [r for r in RATIOS if r[1] in present and all(p in present for p in r[2])]
    head = ["test", "size", "metric", "better"] + impls + [r[0] for r in ratios]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 4 + "---:|" * (len(impls) + len(ratios)))
    for key in keys:
        test, nbytes = key
        _, unit, better = METRICS[test]
        row = [test, size_text(nbytes) if test != "barrier" else "—", unit, better]
        for i in impls:
            vals = samples[key].get(i, [])
            row.append(value_text(median(vals), unit) + spread(vals) if vals else "—")
        for _, ours, peers in ratios:
            r = ratio(samples[key], test, ours, peers)
            row.append(f"{r:.2f}" if r is not None else "—")
        print("| " + " | ".join(row) + " |")
    counts = {i: max(len(s.get(i, [])) for s in samples.values()) for i in impls}
    reps = sorted(set(counts.values()))
    if len(reps) == 1:
        print(f"\nMedians of {reps[0]} repetitions", end="")
    else:
        print("\nMedians over the repetitions each ran ("
              + ", ".join(f"{i} {n}" for i, n in counts.items()) + ")", end="")
    print("; ± is half the range over the median. A ratio is coverse's median over the "
          "peer's (over the better peer's for best(...)): below 1 is better for latency "
          "(lower is better), above 1 for MB/s and msg/s (higher is better). pvr's latency "
          "row (get) is one process_vm_readv call, not a message; ring is coverse's "
          "shared-memory ring alone (ring_bench: no runtime above it), so shm/ring is what "
          "coverse's layers add; line is the same exchange through one fixed place each way "
          "(ring_bench --bare), so line/vader is the lowest shm/vader any layer could reach; "
          "tcpline is the same ping-pong over one loopback TCP connection, one send() and a "
          "spinning recv() per message (tcp_line), so tcpline/ucx-tcp is the lowest "
          "tcp/ucx-tcp any layer over the kernel's TCP could reach.")


def floor_note(by_impl, test, ours, peers, peer_text):
    """What a latency target whose implementation has a floor (FLOORS) measured here adds
    to its line, e.g. " (the bare TCP exchange, tcpline, is 0.95x ucx-tcp)"; else ""."""
    if test != "pingpong" or ours not in FLOORS:
        return ""
    floor, what = FLOORS[ours]
    r = ratio(by_impl, test, floor, peers)
    return f" ({what}, {floor}, is {r:.2f}x {peer_text})" if r is not None else ""


def targets(samples):
    print("\nTargets (issues 10 and 11):\n")
    for what, test, nbytes, ours, peers, op, bound in TARGETS:
        by_impl = samples.get((test, nbytes), {})
        missing = [i for i in (ours,) + peers if not by_impl.get(i)]
        peer_text = peers[0] if len(peers) == 1 else "best(" + ", ".join(peers) + ")"
        note = floor_note(by_impl, test, ours, peers, peer_text)
        if missing:
            print(f"- n/a  {what}: no {test} result at {size_text(nbytes)} from "
                  f"{', '.join(missing)} (target {op} {bound:.2f}){note}")
            continue
        r = ratio(by_impl, test, ours, peers)
        ok = r >= bound if op == ">=" else r <= bound
        print(f"- {'PASS' if ok else 'MISS'} {what}: {ours} / {peer_text} = {r:.2f} "
              f"(target {op} {bound:.2f}){note}")
    small = [(b, ratio(s, "pingpong", "coverse-shm", ("ompi-tcp",)))
             for (t, b), s in sorted(samples.items()) if t == "pingpong" and b <= SMALL]
    small = [(b, r) for b, r in small if r is not None]
    if small:
        worst = max(r for _, r in small)
        sizes = ", ".join(f"{size_text(b)} {r:.2f}" for b, r in small)
        print(f"- {'PASS' if worst <= SMALL_TARGET else 'MISS'} issue 5, same-host "
              f"small-message latency vs Open MPI TCP: coverse-shm / ompi-tcp {sizes} "
              f"(target <= {SMALL_TARGET:.2f} up to {size_text(SMALL)})")


# --- the plot -------------------------------------------------------------------------------

def svg_panel(out, x0, y0, w, h, title, ylabel, series, sizes):
    """A log-log panel at (x0, y0): series is [(impl, label, dash, [(bytes, value)])]."""
    vals = [v for _, _, _, pts in series for _, v in pts if v and v > 0]
    if not vals or not sizes:
        return
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    if hi == lo:
        hi += 1
    sx_lo, sx_hi = math.log2(min(sizes)), math.log2(max(sizes))
    if sx_hi == sx_lo:
        sx_hi += 1
    left, right, top, bottom = 70, 30, 30, 45
    pw, ph = w - left - right, h - top - bottom

    def px(b):
        return x0 + left + (math.log2(b) - sx_lo) / (sx_hi - sx_lo) * pw

    def py(v):
        return y0 + top + ph - (math.log10(v) - lo) / (hi - lo) * ph

    out.append(f'<text x="{x0 + left + pw / 2:.1f}" y="{y0 + 18}" text-anchor="middle" '
               f'font-weight="bold">{title}</text>')
    out.append(f'<rect x="{x0 + left}" y="{y0 + top}" width="{pw}" height="{ph}" '
               f'fill="none" stroke="#333"/>')
    for e in range(lo, hi + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{x0 + left}" y1="{y:.1f}" x2="{x0 + left + pw}" y2="{y:.1f}" '
                   f'stroke="#ddd"/>')
        label = f"{10 ** e:,}" if e >= 0 else f"{10 ** e:g}"
        out.append(f'<text x="{x0 + left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for b in sizes:
        x = px(b)
        out.append(f'<line x1="{x:.1f}" y1="{y0 + top}" x2="{x:.1f}" y2="{y0 + top + ph}" '
                   f'stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + top + ph + 16}" text-anchor="middle">'
                   f'{size_text(b)}</text>')
    out.append(f'<text x="{x0 + left + pw / 2:.1f}" y="{y0 + h - 6}" text-anchor="middle">'
               f'message size (log)</text>')
    out.append(f'<text transform="translate({x0 + 16},{y0 + top + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{ylabel}</text>')
    for impl, _, dash, pts in series:
        pts = [(b, v) for b, v in pts if v and v > 0]
        if not pts:
            continue
        color = COLORS.get(impl, "#000")
        path = " ".join(f"{px(b):.1f},{py(v):.1f}" for b, v in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"'
                   f'{dash}/>')
        for b, v in pts:
            out.append(f'<circle cx="{px(b):.1f}" cy="{py(v):.1f}" r="3" fill="{color}"/>')


def write_svg(path, samples):
    present = {i for s in samples.values() for i in s}
    impls = [i for i in IMPLS if i in present] + sorted(present - set(IMPLS))

    def series(test, label_of=lambda i: i):
        out = []
        for i in impls:
            pts = sorted((b, median(s[i])) for (t, b), s in samples.items() if t == test and i in s)
            if pts:
                dash = ' stroke-dasharray="6,4"' if i.endswith("tcp") or i == "tcpline" else (
                    ' stroke-dasharray="2,3"' if i == "pvr" else "")
                out.append((i, label_of(i), dash, pts))
        return out

    bw = series("bw")
    lat = series("pingpong") + [(i, "pvr (one read)", d, p) for i, _, d, p in series("get")]
    bw_sizes = sorted({b for t, b in samples if t == "bw"})
    lat_sizes = sorted({b for t, b in samples if t in ("pingpong", "get")})
    W, H, legend_h = 1100, 430, 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + legend_h}" '
           f'viewBox="0 0 {W} {H + legend_h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H + legend_h}" fill="white"/>']
    svg_panel(out, 0, 0, W // 2, H, "Bandwidth, window of 64 (higher is better)",
              "MB/s (10^6 B/s, log)", bw, bw_sizes)
    svg_panel(out, W // 2, 0, W // 2, H, "One-way latency, p50 (lower is better)",
              "µs (log)", lat, lat_sizes)
    labels = [(i, lbl, d) for i, lbl, d, _ in bw]
    labels += [(i, lbl, d) for i, lbl, d, _ in lat if (i, lbl, d) not in labels]
    x = 70
    for impl, label, dash in labels:
        color = COLORS.get(impl, "#000")
        out.append(f'<line x1="{x}" y1="{H + 20}" x2="{x + 28}" y2="{H + 20}" stroke="{color}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 34}" y="{H + 24}">{label}</text>')
        x += 44 + 7 * len(label)
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# --- by placement -------------------------------------------------------------------------
# On a VM the host moves the two vCPUs, and every same-host result moves with the cache-line
# floor between them, more for an implementation that moves more cache lines per message.
# bench-perf.sh runs tools/perf/placement_probe before and after each run ("floor_us",
# "floor_after_us"). This machine's probe has shown three placements (docs/perf.md, stops 21
# and 34): close together 0.068-0.084 us, between 0.105-0.233, far apart 0.256-0.327. Between
# and far apart nearly touch, so no rule on the gaps between the floors seen separates them;
# the bands below (--bands changes them) do. A run whose two probes fall in one band is filed
# under it; one whose placement moved across a band during it is left out here.
SAME_HOST = ["coverse-shm", "ompi-vader", "ucx-shm", "ring", "line"]
# tcpline moves with the placement as the TCP layers do (its two processes on the same two
# vCPUs), so it is filed beside them, the floor of that table.
TCP = ["coverse-tcp", "ompi-tcp", "ucx-tcp", "tcpline"]
PLACED = [("pingpong", 8), ("pingpong", 1024), ("rate", 8)]
PLACEMENTS = ("close", "between", "apart")
DEFAULT_BANDS = (0.095, 0.24)  # us: close below the first, apart from the second on


def band_of(floor, bands):
    return PLACEMENTS[sum(floor >= b for b in bands)]


def placement_split(path, bands=DEFAULT_BANDS):
    """{(test, bytes): {placement: {impl: [values]}}} when the probes saw more than one
    placement, else None (no probes, or one placement all along)."""
    runs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "floor_us" in r and "floor_after_us" in r and r.get("test") in METRICS:
                runs.append(r)
    seen = {band_of(v, bands) for r in runs for v in (r["floor_us"], r["floor_after_us"]) if v > 0}
    if len(seen) < 2:
        return None
    split = {}
    for r in runs:
        if r["floor_us"] <= 0 or r["floor_after_us"] <= 0:
            continue
        where = band_of(r["floor_us"], bands)
        if band_of(r["floor_after_us"], bands) != where:
            continue
        impl = LEGACY.get(r.get("impl", "?"), r.get("impl", "?"))
        field = METRICS[r["test"]][0]
        if field not in r:
            continue
        key = (r["test"], r.get("bytes", 0))
        split.setdefault(key, {}).setdefault(where, {}).setdefault(impl, []).append(r[field])
    return split


def placed_rows(split, impls, ours, peer):
    """The rows of one by-placement table: impls' medians and ours / peer, or [] without data."""
    rows = []
    for test, nbytes in PLACED:
        for where in PLACEMENTS:
            by_impl = split.get((test, nbytes), {}).get(where, {})
            if not any(by_impl.get(i) for i in impls):
                continue
            unit = METRICS[test][1]
            cells = [f"{value_text(median(by_impl.get(i, [])), unit)} ({len(by_impl.get(i, []))})"
                     if by_impl.get(i) else "—" for i in impls]
            r = ratio(by_impl, test, ours, (peer,))
            r_text = f"{r:.2f}" if r is not None else "—"
            rows.append(f"| {test} | {size_text(nbytes)} | {where} | " + " | ".join(cells) +
                        f" | {r_text} |")
    return rows


def placement_table(path, bands=DEFAULT_BANDS):
    split = placement_split(path, bands)
    if split is None:
        return
    print(f"\nBy placement of the two vCPUs (cache-line floor probed before and after each run: "
          f"close below {bands[0]:g} us, between below {bands[1]:g}, apart from there on; runs "
          "whose placement moved are left out). The placement moved during this run, so the "
          "medians above mix placements: compare like with like here.\n")
    if not split:
        print("No run stayed in one placement from its first probe to its last.")
        return
    for impls, ours, peer, name in ((SAME_HOST, "coverse-shm", "ompi-vader", "shm/vader"),
                                    (TCP, "coverse-tcp", "ucx-tcp", "tcp/ucx-tcp")):
        # Only the implementations this file has in these rows (the floors are optional).
        impls = [i for i in impls
                 if any(i in by_impl for key in PLACED
                        for by_impl in split.get(key, {}).values())]
        rows = placed_rows(split, impls, ours, peer)
        if not rows:
            continue
        print("| test | size | placement | " + " | ".join(impls) + f" | {name} |")
        print("|---|---|---|" + "---:|" * (len(impls) + 1))
        print("\n".join(rows) + "\n")
    print("(n) is how many runs each median is of.")


def main():
    ap = argparse.ArgumentParser(
        description="The side-by-side table of scripts/bench-perf.sh's JSON lines.")
    ap.add_argument("results", help="the JSON lines file bench-perf.sh wrote")
    ap.add_argument("--svg", metavar="FILE", help="also write the plot to FILE")
    ap.add_argument("--bands", metavar="CLOSE,APART",
                    default=",".join(f"{b:g}" for b in DEFAULT_BANDS),
                    help="placement probe bands in us: close below CLOSE, apart from APART on, "
                    "between in between (default %(default)s, this machine's)")
    a = ap.parse_args()
    try:
        bands = tuple(float(x) for x in a.bands.split(","))
    except ValueError:
        bands = ()
    if len(bands) != 2 or not all(math.isfinite(b) for b in bands) or not 0 < bands[0] < bands[1]:
        ap.error(f"--bands {a.bands}: expected two increasing positive numbers, e.g. 0.095,0.24")
    samples = load(a.results)
    table(samples)
    targets(samples)
    placement_table(a.results, bands)
    if a.svg:
        write_svg(a.svg, samples)
        print(f"\nPlot: {a.svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
