#!/usr/bin/env python3
"""Reads what benches/run compare measured and turns it into text.

    report.py line FILE           one-line summary of an rzk-bench --json result;
                                  exit 1 if it is missing, invalid or has errors
    report.py storm-line FILE     the same for an rzk-bench connect-storm result
    report.py snapshot ...        duration in ms of a snapshot, from a server log
    report.py report ...          the Markdown section (stdout)
    report.py write BENCH SECTION replaces the section (or its subsections) in BENCH

Only the standard library: it runs on a fresh Debian machine with python3.
"""

import argparse
import datetime as dt
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys

SECTION = "## rzk vs Apache ZooKeeper 3.8 (standalone)"
SUB_THROUGHPUT = "### Throughput, latency and server CPU per operation"
SUB_STORM = "### Connection storm"
SUB_FOOTPRINT = "### Memory, restart and snapshot"
SUB_GOALS = "### Goals of issue 15 in this run"
SUBSECTIONS = (SUB_THROUGHPUT, SUB_STORM, SUB_FOOTPRINT, SUB_GOALS)
SERVERS = ("zookeeper", "rzk")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_result(path):
    """An rzk-bench --json result, or None if the file has no valid JSON line."""
    try:
        with open(path) as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def cmd_line(args):
    r = load_result(args.file)
    if r is None:
        print("no JSON result")
        return 1
    server = ""
    if r.get("server_cpu_us_per_op") is not None:
        server = f", server cpu {r['server_cpu_us_per_op']:.1f} us/op"
    print(
        f"{r['ops_per_sec']:.0f} ops/s, p50 {r['p50_us'] / 1000:.2f} ms, "
        f"p99 {r['p99_us'] / 1000:.2f} ms, errors {r['errors']}, "
        f"generator cpu {100 * r['cpu_share']:.0f}%{server}"
    )
    return 0 if r.get("errors") == 0 else 1


def cmd_storm_line(args):
    r = load_result(args.file)
    if r is None:
        print("no JSON result")
        return 1
    print(
        f"{r['established']}/{r['sessions']} sessions at {r['sessions_per_sec']:.0f}/s, "
        f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, errors {r['errors']}"
    )
    return 0 if r.get("errors") == 0 else 1


# ---- snapshot timing from server logs ----

RZK_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z?\s")
ZK_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\s")


def rzk_time(line):
    m = RZK_TS.match(line)
    if not m:
        return None
    s = m.group(1)
    if "." in s:
        head, frac = s.split(".")
        s = f"{head}.{frac[:6].ljust(6, '0')}"
        return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f")
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")


def zk_time(line):
    m = ZK_TS.match(line)
    return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") if m else None


def snapshot_ms(kind, lines, min_nodes):
    """(started, ms): the first snapshot begun in `lines` (for rzk: of at least
    min_nodes nodes) and its duration, or None while it has not finished.

    rzk: from the line "snapshot started ... nodes=N" to the next "snapshot saved"
    (timestamps of its tracing log). ZooKeeper: "Snapshotting: 0x.. to .." and the
    next "Snapshot taken in N ms", the figure ZooKeeperServer.takeSnapshot logs."""
    start = None
    for line in lines:
        line = ANSI.sub("", line)
        if kind == "rzk":
            if start is None:
                m = re.search(r"snapshot started zxid=(\S+) nodes=(\d+)", line)
                if m and int(m.group(2)) >= min_nodes:
                    start, zxid = rzk_time(line), m.group(1)
            elif re.search(r"snapshot saved zxid=" + re.escape(zxid) + r"\b", line):
                end = rzk_time(line)
                return True, round((end - start).total_seconds() * 1000)
        else:
            if start is None:
                if "Snapshotting: 0x" in line:
                    start = zk_time(line)
            else:
                m = re.search(r"Snapshot taken in (\d+) ms", line)
                if m:
                    return True, int(m.group(1))
    return (start is not None), None


def cmd_snapshot(args):
    with open(args.log, errors="replace") as f:
        lines = f.read().splitlines()[args.from_line :]
    started, ms = snapshot_ms(args.kind, lines, args.min_nodes)
    if args.started:
        return 0 if started else 1
    if ms is None:
        return 1
    print(ms)
    return 0


# ---- the report ----


def machine(work_dir):
    """nproc, memory, CPU model and the disk under the work dir."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    disk = "?"
    try:
        src, fstype = subprocess.run(
            ["findmnt", "-no", "SOURCE,FSTYPE", "-T", work_dir],
            capture_output=True, text=True, check=True,
        ).stdout.split()[:2]
        dev = os.path.basename(src)
        parent = subprocess.run(
            ["lsblk", "-ndo", "PKNAME", src], capture_output=True, text=True
        ).stdout.strip() or dev
        rota = open(f"/sys/block/{parent}/queue/rotational").read().strip()
        model = subprocess.run(
            ["lsblk", "-ndo", "MODEL", f"/dev/{parent}"], capture_output=True, text=True
        ).stdout.strip()
        kind = "rotational" if rota == "1" else "non-rotational"
        disk = f"{fstype} on {src}" + (f" ({model})" if model else "") + f", {kind} per the kernel"
    except (OSError, ValueError, subprocess.CalledProcessError):
        pass
    load = "?"
    try:
        load = open("/proc/loadavg").read().split()[0]
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "mem": mem, "cpu": cpu, "disk": disk, "load": load}


def versions(a):
    zk = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "zookeeper"], capture_output=True, text=True
    ).stdout.strip() or "?"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    java = java.splitlines()[0] if java else "?"
    rzk = subprocess.run([a.rzk_bin, "--version"], capture_output=True, text=True).stdout.strip()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rev = subprocess.run(
        ["git", "-C", repo, "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    return {"zk": zk, "java": java, "rzk": rzk or "?", "rev": rev or "?"}


def median(xs):
    return statistics.median(xs) if xs else None


def fmt_num(x, digits=0):
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def fmt_ms(us):
    return "–" if us is None else f"{us / 1000:.2f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def throughput_rows(work_dir, workloads, inflight, servers=SERVERS):
    """Per workload: medians per server and the range of per-round ratios."""
    rows = []
    problems = []
    for w in workloads:
        per = {}
        rounds = {}
        for s in servers:
            results = []
            pattern = os.path.join(work_dir, "runs", f"{w}.{s}.i{inflight}.r*.json")
            for path in sorted(glob.glob(pattern)):
                rnd = int(re.search(r"\.r(\d+)\.json$", path).group(1))
                r = load_result(path)
                if r is None or r.get("errors") != 0:
                    problems.append(f"{w} ×{inflight} on {s}, round {rnd}: " + ("no result" if r is None else f"{r['errors']} errors"))
                    continue
                results.append(r)
                rounds.setdefault(rnd, {})[s] = r["ops_per_sec"]
            per[s] = {
                "n": len(results),
                "ops": median([r["ops_per_sec"] for r in results]),
                "p50": median([r["p50_us"] for r in results]),
                "p99": median([r["p99_us"] for r in results]),
                "cpu": median([r["cpu_share"] for r in results]),
                "srv": median([r["server_cpu_us_per_op"] for r in results if r.get("server_cpu_us_per_op") is not None]),
            }
        ratios = [v["rzk"] / v["zookeeper"] for v in rounds.values() if "rzk" in v and v.get("zookeeper")]
        rows.append((w, per, ratios))
    return rows, problems


def fmt_us(x):
    return "–" if x is None else (f"{x:.1f}" if x < 100 else f"{x:.0f}")


def inflights_of(a):
    return [int(x) for x in str(a.inflights).split(",") if x]


def throughput_section(a, m, v):
    workloads = [w for w in a.workloads.split(",") if w]
    tables = []
    problems = []
    for k in inflights_of(a):
        rows, probs = throughput_rows(a.work_dir, workloads, k)
        problems += probs
        if any(per[s]["n"] for _, per, _ in rows for s in SERVERS):
            tables.append((k, rows))
    if not tables:
        return None
    out = [SUB_THROUGHPUT, ""]
    out.append(
        (f"Warm-up (not counted): every workload once for {a.warmup_seconds} s on each server. "
         if a.warmup_seconds else "No warm-up. ") +
        f"Each workload ran {a.rounds} time(s) on each server for {a.seconds} s, alternating "
        "(round 1: ZooKeeper then rzk; round 2: rzk then ZooKeeper; ...), at each number of "
        "requests in flight per session; the figures are "
        f"medians over the rounds. rzk-bench: {a.sessions} sessions, "
        f"{a.value_bytes}-byte values (watch: 100 watcher sessions; storm: "
        "one op = connect + closeSession). Latency in ms. \"ratio range\" is rzk/ZooKeeper "
        "throughput in each round, lowest to highest. \"CPU µs/op\" is the server process's own "
        "CPU time (user + sys from /proc/<pid>/stat, all threads, read by rzk-bench at the start "
        "and end of the timed phase) over the operations answered: it depends much less on what "
        "else runs on the machine than ops/s does. \"gen CPU\" is the generator's own CPU "
        "share of the machine (user+sys over seconds × cores): when it is high, the generator, "
        "not the server, may be the limit."
    )
    for k, rows in tables:
        out.append("")
        out.append(f"**{k} request(s) in flight per session** ({a.sessions} sessions):")
        out.append("")
        out.append(
            "| workload | ZooKeeper ops/s | rzk ops/s | rzk/ZK | ratio range | ZK p50 | rzk p50 "
            "| ZK p99 | rzk p99 | p99 rzk/ZK | ZK CPU µs/op | rzk CPU µs/op | CPU rzk/ZK "
            "| gen CPU ZK | gen CPU rzk |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for w, per, ratios in rows:
            z, r = per["zookeeper"], per["rzk"]
            rng = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "–"
            cpu = lambda x: "–" if x is None else f"{100 * x:.0f}%"  # noqa: E731
            out.append(
                f"| {w} | {fmt_num(z['ops'])} | {fmt_num(r['ops'])} | {fmt_ratio(r['ops'], z['ops'])} "
                f"| {rng} | {fmt_ms(z['p50'])} | {fmt_ms(r['p50'])} | {fmt_ms(z['p99'])} "
                f"| {fmt_ms(r['p99'])} | {fmt_ratio(r['p99'], z['p99'])} | {fmt_us(z['srv'])} "
                f"| {fmt_us(r['srv'])} | {fmt_ratio(r['srv'], z['srv'])} | {cpu(z['cpu'])} | {cpu(r['cpu'])} |"
            )
    snap = snapshot_check_rows(a)
    if snap:
        out.append("")
        out.append(
            "**Snapshots and the log.** Each create run on rzk was followed by the same run on a "
            "second rzk with snapshots off (snapCount=1000000000), same machine, same rounds: a "
            "create load grows the tree, so rzk snapshots a growing tree every snapCount/2–snapCount "
            "txns, and the question is what that costs the log."
        )
        out.append("")
        out.append("| in flight | rzk create ops/s, snapshots on | snapshots off | on/off | p99 on | p99 off | CPU µs/op on | off |")
        out.append("|---|---|---|---|---|---|---|---|")
        for k, on, off in snap:
            out.append(
                f"| {k} | {fmt_num(on['ops'])} | {fmt_num(off['ops'])} | {fmt_pct(on['ops'], off['ops'])} "
                f"| {fmt_ms(on['p99'])} | {fmt_ms(off['p99'])} | {fmt_us(on['srv'])} | {fmt_us(off['srv'])} |"
            )
    out.append("")
    out.append(LIMITS_THROUGHPUT)
    if problems:
        out.append("")
        out.append("Runs left out because they failed: " + "; ".join(problems) + ".")
    return out


def fmt_pct(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{100 * a / b:.0f} %"


def snapshot_check_rows(a):
    rows = []
    for k in inflights_of(a):
        got, _ = throughput_rows(a.work_dir, ["create"], k, ("rzk", "rzk-nosnap"))
        (_, per, _), = got
        if per["rzk"]["n"] and per["rzk-nosnap"]["n"]:
            rows.append((k, per["rzk"], per["rzk-nosnap"]))
    return rows


def storm_results(a):
    """{server: {phase: [result, ...]}} of the connection storm."""
    res = {}
    for s in SERVERS:
        for phase in ("new", "resume"):
            for path in sorted(glob.glob(os.path.join(a.work_dir, "storm", f"{s}.{phase}.r*.json"))):
                r = load_result(path)
                if r is not None and r.get("errors") == 0 and r.get("established") == r.get("sessions"):
                    res.setdefault(s, {}).setdefault(phase, []).append(r)
    return res


def storm_medians(a):
    res = storm_results(a)
    med = {}
    for s, phases in res.items():
        for phase, rs in phases.items():
            med[(s, phase)] = {
                "rate": median([r["sessions_per_sec"] for r in rs]),
                "p50": median([r["p50_ms"] for r in rs]),
                "p99": median([r["p99_ms"] for r in rs]),
                "n": len(rs),
            }
    return med


def storm_section(a, m, v):
    med = storm_medians(a)
    if not med:
        return None
    out = [SUB_STORM, ""]
    out.append(
        f"`rzk-bench connect-storm`: {a.storm_sessions:,} sessions established "
        f"{a.storm_parallelism} at a time on a fresh server, one session = TCP connect + "
        "ConnectRequest + ConnectResponse + one ping answered (the `zookeeper-client` crate "
        "counts a session as connected only then); the sessions stay open (pinged) until all are "
        "established and are left open. Then the server is killed (SIGKILL, a failed member) and "
        "started again, and as soon as it serves, all the saved sessions are resumed the same "
        "way (session id and password; each must come back as itself). Rate = sessions over the "
        "wall time from the first connect to the last session established; latency = from the TCP "
        f"connect to the ping's reply, in ms. Medians over {a.rounds} round(s), servers alternating."
    )
    out.append("")
    out.append("| | ZooKeeper | rzk | rzk/ZK |")
    out.append("|---|---|---|---|")
    for phase, label in (("new", "new sessions"), ("resume", "resumed after kill -9 and restart")):
        z, r = med.get(("zookeeper", phase), {}), med.get(("rzk", phase), {})
        out.append(f"| {label}: sessions/s | {fmt_num(z.get('rate'))} | {fmt_num(r.get('rate'))} | {fmt_ratio(r.get('rate'), z.get('rate'))} |")
        out.append(f"| {label}: p50 ms | {fmt_num(z.get('p50'), 1)} | {fmt_num(r.get('p50'), 1)} | {fmt_ratio(r.get('p50'), z.get('p50'))} |")
        out.append(f"| {label}: p99 ms | {fmt_num(z.get('p99'), 1)} | {fmt_num(r.get('p99'), 1)} | {fmt_ratio(r.get('p99'), z.get('p99'))} |")
    return out


LIMITS_THROUGHPUT = (
    "Limits: the generator runs on the same machine as the server and takes its share of the "
    "cores (the gen CPU column); `delete` deletes 2000 pre-created znodes per session and ends "
    "when they are gone, so its runs are shorter than the others; every run's answers are "
    "checked by rzk-bench, and a run with any error is left out and fails the script."
)


def read_fp(work_dir, kind):
    d = {}
    try:
        with open(os.path.join(work_dir, "fp", f"{kind}.txt")) as f:
            for line in f:
                k, _, val = line.strip().partition("=")
                if k:
                    try:
                        d[k] = float(val)
                    except ValueError:
                        pass
    except OSError:
        return None
    for tag in ("populate-mem", "populate-restart"):
        r = load_result(os.path.join(work_dir, "fp", f"{kind}.{tag}.json"))
        if r is not None:
            d[f"{tag}_ops"] = r.get("ops_per_sec")
    return d


FP_PATH = "/rzk-populate"
FP_CHUNK = 100000


def populate_path_bytes(n):
    """Mean length of the paths `rzk-bench populate` gives N znodes (footprint.sh:
    children n0, n1, ... of /rzk-populate-0, -1, ..., at most FP_CHUNK each)."""
    total, left, c = 0, n, 0
    while left > 0:
        k = min(left, FP_CHUNK)
        parent = len(f"{FP_PATH}-{c}/n")
        digits = sum(len(str(i)) for i in range(k))
        total += k * parent + digits
        left -= k
        c += 1
    return total / n if n else 0


def per_znode_beyond(d, n, value_bytes):
    """RSS added per znode by the populate, less its path and data, in bytes."""
    if d is None or d.get("rss_populated_kib") is None or d.get("rss_started_kib") is None:
        return None
    per = (d["rss_populated_kib"] - d["rss_started_kib"]) * 1024 / n
    return per - populate_path_bytes(n) - value_bytes


def per_session_kib(d, sessions):
    if d is None or d.get("rss_idle_kib") is None or d.get("rss_populated_kib") is None:
        return None
    return (d["rss_idle_kib"] - d["rss_populated_kib"]) / sessions


def footprint_section(a, m, v):
    fp = {s: read_fp(a.work_dir, s) for s in SERVERS}
    if not all(fp.values()):
        return None
    z, r = fp["zookeeper"], fp["rzk"]
    zx = read_fp(a.work_dir, "zookeeper-xms") or {}
    mib = lambda k: lambda d: None if d.get(k) is None else d[k] / 1024  # noqa: E731
    get = lambda k: lambda d: d.get(k)  # noqa: E731
    zn, idle, rs = f"{a.fp_znodes:,}", f"{a.fp_idle_sessions:,}", f"{a.fp_restart_znodes:,}"
    metrics = [
        ("VmRSS just after start, MiB", mib("rss_started_kib"), 1),
        (f"VmRSS after populate of {zn} znodes, MiB", mib("rss_populated_kib"), 1),
        (f"RSS added per znode beyond its path and data (mean path {populate_path_bytes(a.fp_znodes):.1f} B, data {a.value_bytes} B), bytes",
         lambda d: per_znode_beyond(d, a.fp_znodes, a.value_bytes), 0),
        (f"VmRSS with {idle} idle sessions held, MiB", mib("rss_idle_kib"), 1),
        ("RSS added per idle session, KiB", lambda d: per_session_kib(d, a.fp_idle_sessions), 2),
        (f"time to open {idle} sessions (READY), ms", get("idle_connect_ms"), 0),
        (f"populate rate ({rs} creates), znodes/s", get("populate-restart_ops"), 0),
        (f"VmRSS with {rs} znodes, MiB", mib("rss_populated_restart_kib"), 1),
        (f"snapshot of ≥ {rs} znodes, ms", get("snapshot_ms"), 0),
        ("graceful stop (SIGTERM to exit), ms", get("stop_ms"), 0),
        (f"restart: exec to serving all {rs} children, ms", get("restart_ms"), 0),
        ("VmRSS after the restart, MiB", mib("rss_restarted_kib"), 1),
    ]
    out = [SUB_FOOTPRINT, ""]
    out.append(
        "One server at a time, each on a fresh data dir. VmRSS is read from "
        "/proc/<pid>/status of the server process (for ZooKeeper the JVM: its RSS follows how "
        "much of the heap has been touched, not the live data; \"ZooKeeper\" runs with the "
        f"flags above, \"ZooKeeper -Xms\" with `{a.zk_jvm_xms}`, the heap committed up front, "
        "measured for memory only). Idle sessions: `rzk-bench "
        "idle-sessions` (one TCP connection per session, kept alive by pings), RSS read while "
        "READY is held. Snapshot: after the populate, setData in chunks of 5000 until the "
        f"server begins a snapshot of the whole tree (snapCount={a.snap_count} on both), timed from the "
        "server's log: rzk from \"snapshot started\" to \"snapshot saved\" (its incremental "
        "serialisation, then written, fsynced, cataloged and older history purged); ZooKeeper the \"Snapshot taken in N ms\" line that follows "
        "\"Snapshotting: 0x…\" (its background snapshot, `takeSnapshot(false)`, writes without "
        "fsync). Restart: SIGTERM, wait for the exit, then exec; timed from just before exec "
        "until `rzk-bench wait-serving --check-path /rzk-populate-K --expect-children M` returns for "
        "the last populated parent (populates go to parents of at most 100,000 children; every "
        "parent's count is checked after the timing; ZooKeeper also writes a full snapshot "
        "while starting)."
    )
    out.append("")
    out.append("| measure | ZooKeeper | ZooKeeper -Xms | rzk | rzk/ZK |")
    out.append("|---|---|---|---|---|")
    for name, f, digits in metrics:
        zv, xv, rv = f(z), (f(zx) if zx else None), f(r)
        out.append(f"| {name} | {fmt_num(zv, digits)} | {fmt_num(xv, digits)} | {fmt_num(rv, digits)} | {fmt_ratio(rv, zv)} |")
    return out


def goals_section(a, m, v):
    """Every footprint goal this run measured: the figure and met or missed."""
    rows = []

    def add(goal, measured, ok):
        rows.append((goal, measured, "–" if ok is None else ("met" if ok else "**missed**")))

    cpu_set = ["create", "set", "delete", "get", "exists", "children", "mixed", "multi", "watch"]
    kinds = {"writes": (["create", "set", "delete", "multi"], 3.0), "reads": (["get", "exists", "children"], 2.0),
             "mixed (90 % reads)": (["mixed"], 2.0)}
    workloads = [w for w in a.workloads.split(",") if w]
    for k in inflights_of(a):
        rows_k, _ = throughput_rows(a.work_dir, workloads, k)
        per = {w: p for w, p, _ in rows_k}
        cpu = [(w, per[w]["rzk"]["srv"] / per[w]["zookeeper"]["srv"]) for w in cpu_set
               if w in per and per[w]["rzk"]["srv"] and per[w]["zookeeper"]["srv"]]
        if cpu:
            worst = max(cpu, key=lambda x: x[1])
            over = [f"{w} {x:.2f}" for w, x in cpu if x > 0.25]
            add(f"server CPU per op ≤ 1/4 of ZooKeeper's, every workload, {k} in flight",
                f"worst {worst[0]} {worst[1]:.2f}" + (f"; above 0.25: {', '.join(over)}" if over else ""),
                not over)
        if "get" in per and per["get"]["rzk"]["srv"] is not None:
            g = per["get"]["rzk"]["srv"]
            add(f"get ≤ 6 µs of server CPU, {k} in flight", f"{g:.1f} µs", g <= 6.0)
        if k != 1:
            continue
        for label, (ws, goal) in kinds.items():
            got = [(w, per[w]["rzk"]["ops"] / per[w]["zookeeper"]["ops"]) for w in ws
                   if w in per and per[w]["rzk"]["ops"] and per[w]["zookeeper"]["ops"]]
            if got:
                add(f"throughput, {a.sessions} sessions × 1 in flight, {label} ≥ {goal:g}× ZooKeeper's",
                    ", ".join(f"{w} {x:.2f}×" for w, x in got), all(x >= goal for _, x in got))
        p99 = [(w, per[w]["rzk"]["p99"] / per[w]["zookeeper"]["p99"]) for w in workloads
               if w in per and per[w]["rzk"]["p99"] and per[w]["zookeeper"]["p99"]]
        if p99:
            over = [f"{w} {x:.2f}" for w, x in p99 if x > 1 / 3]
            add("p99 ≤ 1/3 of ZooKeeper's, 1 in flight",
                f"worst {max(p99, key=lambda x: x[1])[0]} {max(x for _, x in p99):.2f}" + (f"; above 0.33: {', '.join(over)}" if over else ""),
                not over)
    for k, on, off in snapshot_check_rows(a):
        if on["ops"] and off["ops"]:
            add(f"create with snapshots on ≥ 90 % of snapshots off, {k} in flight",
                f"{100 * on['ops'] / off['ops']:.0f} %", on["ops"] >= 0.9 * off["ops"])
    med = storm_medians(a)
    for phase in ("new", "resume"):
        z, r = med.get(("zookeeper", phase)), med.get(("rzk", phase))
        if z and r and z["rate"] and z["p99"]:
            rate, p99 = r["rate"] / z["rate"], r["p99"] / z["p99"]
            add(f"connection storm ({phase}): ≥ 2× ZooKeeper's rate, p99 ≤ 1/3",
                f"{rate:.2f}×, p99 {p99:.2f}", rate >= 2 and p99 <= 1 / 3)
    fp = {s: read_fp(a.work_dir, s) for s in SERVERS}
    z, r = fp["zookeeper"], fp["rzk"]
    if z and r:
        beyond = per_znode_beyond(r, a.fp_znodes, a.value_bytes)
        if beyond is not None:
            add("≤ 150 B per znode beyond its path and data", f"{beyond:.0f} B", beyond <= 150)
        if r.get("rss_populated_kib") and z.get("rss_populated_kib"):
            rm, zm = r["rss_populated_kib"] / 1024, z["rss_populated_kib"] / 1024
            add(f"RSS with {a.fp_znodes:,} znodes ≤ 1/10 of ZooKeeper's (no -Xms) and ≤ 42 MiB",
                f"{rm:.1f} MiB = {rm / zm:.3f} of {zm:.0f} MiB", rm <= zm / 10 and rm <= 42)
        ps = per_session_kib(r, a.fp_idle_sessions)
        if ps is not None:
            add("an idle session ≤ 1 KiB", f"{ps:.2f} KiB", ps <= 1.0)
        if r.get("restart_ms") and z.get("restart_ms"):
            add(f"restart with {a.fp_restart_znodes:,} znodes ≤ 1/10 of ZooKeeper's (≤ 570 ms here)",
                f"{r['restart_ms']:.0f} ms = {r['restart_ms'] / z['restart_ms']:.2f} of {z['restart_ms']:.0f} ms",
                r["restart_ms"] <= z["restart_ms"] / 10)
        if r.get("snapshot_ms") and z.get("snapshot_ms"):
            add(f"snapshot of {a.fp_restart_znodes:,} znodes ≤ 1/2 of ZooKeeper's time",
                f"{r['snapshot_ms']:.0f} ms = {r['snapshot_ms'] / z['snapshot_ms']:.2f} of {z['snapshot_ms']:.0f} ms",
                r["snapshot_ms"] <= z["snapshot_ms"] / 2)
    if not rows:
        return None
    out = [SUB_GOALS, ""]
    out.append(
        "Computed by report.py from the figures above (nothing here is typed in by hand); a "
        "goal this run did not measure is not listed."
    )
    out.append("")
    out.append("| goal | measured | |")
    out.append("|---|---|---|")
    for g, meas, ok in rows:
        out.append(f"| {g} | {meas} | {ok} |")
    return out


def command_lines(a, v):
    """The run's command line, where its binaries came from, and its --note."""
    return [
        f"Command: `{a.command.strip()}` ({v['rzk']}; "
        + ("binaries built by the script from this repository at "
           if not a.bins_from_env else "binaries given by RZK_BIN and RZK_BENCH_BIN; repository at ")
        + f"`{v['rev']}`).",
        "",
    ] + ([f"Note: {a.note}", ""] if a.note else [])


def run_header(a, m, v):
    return [
        f"Run {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; machine: "
        f"{m['nproc']} cores ({m['cpu']}), {m['mem']} RAM, {m['disk']}; load average "
        f"{m['load']} when the report was written.",
        "",
    ] + command_lines(a, v) + [
        f"Apache ZooKeeper {v['zk']} (Debian package), ZooKeeperServerMain on {v['java']}, JVM "
        f"flags `{a.zk_jvm}`. Both servers: tickTime=2000, forceSync=yes (fsync on), "
        f"snapCount={a.snap_count}, maxClientCnxns=0, globalOutstandingLimit 1000 (default of both), "
        "4lw.commands.whitelist=*, 127.0.0.1 only, data dirs side by side on the disk above.",
        "",
    ]


def cmd_report(a):
    m = machine(a.work_dir)
    v = versions(a)
    parts = [x for x in (throughput_section(a, m, v), storm_section(a, m, v), footprint_section(a, m, v),
                         goals_section(a, m, v)) if x]
    out = [SECTION, ""]
    out.append(
        "Measured by `benches/run compare` (see its `--help`): both servers on the same "
        "machine, driven by the same generator (`rzk-bench`) with the same settings. "
        "Absolute numbers drift with the machine; the ratios are the point."
    )
    out.append("")
    for p in parts:
        # Each subsection carries its own run header: a partial run replaces one
        # subsection and keeps the other, which then still says where it came from.
        out += p[:2] + run_header(a, m, v) + p[2:]
        out.append("")
    print("\n".join(out).rstrip() + "\n")
    return 0


# ---- writing BENCHMARKS.md ----


def split_subsections(text):
    """(intro, {heading: block}, order) of a section's text after its title."""
    intro, subs, order, cur = [], {}, [], None
    for line in text.splitlines():
        if line.startswith("### "):
            cur = line.strip()
            subs[cur] = [line]
            order.append(cur)
        elif cur is None:
            intro.append(line)
        else:
            subs[cur].append(line)
    return intro, subs, order


def cmd_write(a):
    with open(a.bench) as f:
        doc = f.read()
    with open(a.section) as f:
        new = f.read().rstrip() + "\n"
    start = doc.find("\n" + SECTION + "\n")
    if start < 0:
        doc = doc.rstrip() + "\n\n" + new
    else:
        start += 1
        nxt = doc.find("\n## ", start + len(SECTION))
        end = len(doc) if nxt < 0 else nxt + 1
        old = doc[start:end]
        _, new_subs, _ = split_subsections(new)
        # A partial run (only throughput, or only footprint) keeps the other
        # subsection of the previous full run.
        if len(new_subs) < len(SUBSECTIONS):
            old_intro, old_subs, _ = split_subsections(old)
            for head, block in new_subs.items():
                old_subs[head] = block + [""]
            order = [h for h in SUBSECTIONS if h in old_subs]
            order += [h for h in old_subs if h not in order]
            merged = old_intro + [ln for h in order for ln in old_subs[h]]
            new = "\n".join(merged).rstrip() + "\n"
        doc = doc[:start] + new + ("\n" + doc[end:] if end < len(doc) else "")
    with open(a.bench, "w") as f:
        f.write(doc)
    return 0


def parse_args(report_str, report_int, extra=None):
    """The command line every report script shares: `report` with the run's
    settings (the names in REPORT_STR as strings, in REPORT_INT as integers,
    all required, plus --bins-from-env and --note) and `write BENCH SECTION`;
    EXTRA(subparsers), if given, adds a script's own subcommands first."""
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    if extra:
        extra(sub)
    s = sub.add_parser("report")
    for k in report_str:
        s.add_argument("--" + k, required=True)
    for k in report_int:
        s.add_argument("--" + k, type=int, required=True)
    s.add_argument("--bins-from-env", action="store_true")
    s.add_argument("--note", default="")
    s = sub.add_parser("write")
    s.add_argument("bench")
    s.add_argument("section")
    return p.parse_args()


def main():
    def extra(sub):
        s = sub.add_parser("line")
        s.add_argument("file")
        s = sub.add_parser("storm-line")
        s.add_argument("file")
        s = sub.add_parser("snapshot")
        s.add_argument("--kind", choices=SERVERS, required=True)
        s.add_argument("--log", required=True)
        s.add_argument("--from-line", type=int, default=0)
        s.add_argument("--min-nodes", type=int, default=0)
        s.add_argument("--started", action="store_true", help="only: has a snapshot begun?")

    a = parse_args(("work-dir", "command", "zk-jvm", "zk-jvm-xms", "rzk-bin", "bench-bin", "workloads", "inflights"),
                   ("warmup-seconds", "snap-count", "rounds", "seconds", "sessions", "value-bytes", "fp-znodes",
                    "fp-idle-sessions", "fp-restart-znodes", "storm-sessions", "storm-parallelism"), extra)
    return {"line": cmd_line, "storm-line": cmd_storm_line, "snapshot": cmd_snapshot, "report": cmd_report,
            "write": cmd_write}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
