#!/usr/bin/env python3
"""Turns the output of `ucx_perftest -b BATCH -f` (the client's side) into coverse-perf's JSON
lines, for scripts/bench-perf.sh. Each batch line's name must be TEST_BYTES, TEST one of
pingpong, bw, rate (bench-perf.sh writes them so); the final numbers of each line map as:

  ucx_perftest column              JSON field   note
  latency 50.0%ile (pingpong)      p50_us       UCX halves the round trip for *_lat tests:
  latency overall  (pingpong)      lat_us         both are one-way µs already
  bandwidth overall (bw)           mbps         UCX's "MB/s" is 2^20 B/s: times 1.048576
  message rate overall (rate)      msgs_per_s

Usage: scripts/ucx-perftest-json.py IMPL WINDOW < client-output
"""
import json
import re
import sys

ROW = re.compile(r"^\s*(pingpong|bw|rate)_(\d+)\s+(\d+)\s+" + r"\s+".join([r"(\S+)"] * 7) + r"\s*$")


def main(impl, window):
    seen = 0
    for line in sys.stdin:
        m = ROW.match(line)
        if not m:
            continue
        test, nbytes, iters = m.group(1), int(m.group(2)), int(m.group(3))
        p50, _lat_now, lat, _bw_now, bw, _rate_now, rate = (float(v) for v in m.groups()[3:])
        r = {"test": test, "impl": impl, "bytes": nbytes}
        if test == "pingpong":
            r.update(lat_us=round(lat, 3), p50_us=round(p50, 3), iters=iters)
        elif test == "bw":
            # UCX counts messages; coverse-perf counts windows of them.
            r.update(mbps=round(bw * 1.048576, 3), window=window, iters=iters // window)
        else:
            r.update(msgs_per_s=round(rate), window=window, iters=iters // window)
        r["pes"] = 2
        print(json.dumps(r, separators=(",", ":")))
        seen += 1
    if not seen:
        sys.exit("ucx-perftest-json: no result lines in the input")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stdout if len(sys.argv) == 2 else sys.stderr)
        sys.exit(0 if len(sys.argv) == 2 else 2)
    main(sys.argv[1], int(sys.argv[2]))
