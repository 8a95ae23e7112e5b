#!/usr/bin/env python3
"""Splits the failover samples of rzk-chaos runs by the fault that caused them.

The JSON line of a run pools every leader kill ("failover_ms.samples", in
schedule order); the run's printed report lists the faults in the same order.
A plain `kill-leader` measures failover; a `kill-leader+partition` leaves no
quorum until the killed member restarts, so it measures the restart instead.

    chaos/failover-by-fault.py OUT [OUT...]   # OUT as given to chaos/reliability.sh

reads OUT (JSON lines) and OUT.seed<N>.txt (each run's report) and prints, per
server and fault kind: samples, p50, max (milliseconds).
"""
import json
import re
import sys
from collections import defaultdict

KINDS = ("kill-leader", "kill-leader+partition")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(outs):
    by = defaultdict(list)
    for out in outs:
        for line in open(out):
            run = json.loads(line)
            report = open(f"{out}.seed{run['seed']}.txt").read()
            kinds = [k for k in re.findall(r"^\s*fault (\S+)", report, re.M) if k in KINDS]
            samples = run["failover_ms"]["samples"]
            if len(kinds) != len(samples):
                sys.exit(f"{out} seed {run['seed']}: {len(kinds)} leader kills, {len(samples)} samples")
            for k, ms in zip(kinds, samples):
                by[(run["server"], k)].append(ms)
    print("| server | fault | samples | p50 | max |")
    print("|---|---|---|---|---|")
    for (server, kind), xs in sorted(by.items()):
        print(f"| {server} | {kind} | {len(xs)} | {pct(xs, 0.5):.0f} ms | {max(xs):.0f} ms |")


if __name__ == "__main__":
    main(sys.argv[1:])
