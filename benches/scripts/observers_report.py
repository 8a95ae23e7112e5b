#!/usr/bin/env python3
"""The report of `benches/run compare --mode observers` (benches/scripts/observers.sh).

    observers_report.py report ...          the Markdown section (stdout)
    observers_report.py write BENCH SECTION replaces (or adds) the section in BENCH

Reads runs/LABEL.KIND.iK.rR.{json,load} (one rzk-bench run; LABEL says which members
of which ensemble it loaded, KIND is zookeeper or rzk; .load is the 1-minute load
average when it started), mem/ID.{idle,end}.jsonl (each member's role and memory),
state/ID.{start,end}.N.{srvr,mntr} (four-letter words of every member) and the
members' logs. Uses report.py's helpers (beside this file). Standard library only.
"""

import datetime as dt
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (benches/scripts/report.py)
import ensemble_report  # noqa: E402

SECTION = "## rzk vs Apache ZooKeeper 3.8 (3 voters + 2 observers)"
# The section this one follows in BENCHMARKS.md when it is new.
AFTER = ensemble_report.SECTION

LABELS = {
    "get-observers": "get, sessions on the 2 observers",
    "get-all": "get, sessions on all 5 members",
    "create-voters": "create, sessions on the 3 voters (observers attached)",
    "create-noobs": "create, 3 voters without observers",
    "set-voters": "set, sessions on the 3 voters (observers attached)",
    "set-noobs": "set, 3 voters without observers",
}
READS = ("get-observers", "get-all")
# (with observers, without): the cost of the observers to the voters' writes.
WRITE_PAIRS = (("create-voters", "create-noobs"), ("set-voters", "set-noobs"))
GOAL_READS = 2.0
GOAL_WRITE_COST = 0.10
# Ensemble ids of observers.sh: the 3+2 one and the 3-voter one of each kind.
ENSEMBLES = (("zookeeper", "ZooKeeper 3+2"), ("rzk", "rzk 3+2"),
             ("zookeeper3", "ZooKeeper 3"), ("rzk3", "rzk 3"))


def loads(work_dir, label, inflight):
    out = []
    for path in glob.glob(os.path.join(work_dir, "runs", f"{label}.*.i{inflight}.r*.load")):
        try:
            out.append(float(open(path).read().strip()))
        except (OSError, ValueError):
            pass
    return out


def fmt_load(xs):
    if not xs:
        return "–"
    lo, hi = min(xs), max(xs)
    return f"{lo:.1f}" if lo == hi else f"{lo:.1f}–{hi:.1f}"


def fourlw(work_dir, ens, when, n, word):
    try:
        with open(os.path.join(work_dir, "state", f"{ens}.{when}.{n}.{word}")) as f:
            return f.read()
    except OSError:
        return ""


def member_states(work_dir, ens, when):
    """Per member: its srvr Mode and the mntr lines about observers."""
    out = []
    for path in sorted(glob.glob(os.path.join(work_dir, "state", f"{ens}.{when}.*.srvr"))):
        n = int(path.rsplit(".", 2)[-2])
        srvr = fourlw(work_dir, ens, when, n, "srvr")
        mode = re.search(r"^Mode: (\S+)", srvr, re.M)
        mntr = fourlw(work_dir, ens, when, n, "mntr")
        obs = [
            f"{k} {v}"
            for k, v in re.findall(r"^zk_(\w*observer\w*)\s+(\S+)", mntr, re.M)
            if not re.search(r"sync_time", k)
        ]
        out.append((n, mode.group(1) if mode else "?", obs))
    return sorted(out)


def rzk_observer_mode(work_dir):
    """How this rzk build treated observerMasterPort, from its observers' logs."""
    logs = glob.glob(os.path.join(work_dir, "rzk", "m*", "server.log"))
    text = ""
    for path in logs:
        try:
            text += open(path, errors="replace").read()
        except OSError:
            pass
    text = report.ANSI.sub("", text)
    if re.search(r"unknown configuration key \\?\"observerMasterPort", text):
        return ("this rzk build does not know `observerMasterPort` (its log: \"unknown "
                "configuration key \\\"observerMasterPort\\\"; ignored\"), so **rzk's observers "
                "followed the leader**")
    return ("this rzk build accepted `observerMasterPort` (no warning in its log); which voter "
            "each observer followed is in the role lines below")


def table(a, labels, k):
    rows, problems = report.throughput_rows(a.work_dir, labels, k)
    out = [
        "| run | ZooKeeper ops/s | rzk ops/s | rzk/ZK | ratio range | ZK p50 | rzk p50 | ZK p99 "
        "| rzk p99 | p99 rzk/ZK | ZK CPU µs/op | rzk CPU µs/op | CPU rzk/ZK | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w, per, ratios in rows:
        z, r = per["zookeeper"], per["rzk"]
        if not (z["n"] or r["n"]):
            continue
        rng = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "–"
        out.append(
            f"| {LABELS.get(w, w)} | {report.fmt_num(z['ops'])} | {report.fmt_num(r['ops'])} "
            f"| {report.fmt_ratio(r['ops'], z['ops'])} | {rng} | {report.fmt_ms(z['p50'])} "
            f"| {report.fmt_ms(r['p50'])} | {report.fmt_ms(z['p99'])} | {report.fmt_ms(r['p99'])} "
            f"| {report.fmt_ratio(r['p99'], z['p99'])} | {report.fmt_us(z['srv'])} "
            f"| {report.fmt_us(r['srv'])} | {report.fmt_ratio(r['srv'], z['srv'])} "
            f"| {fmt_load(loads(a.work_dir, w, k))} |"
        )
    return out, rows, problems


def round_ops(work_dir, label, kind, k):
    """ops/s of each round without errors, by round."""
    out = {}
    for path in glob.glob(os.path.join(work_dir, "runs", f"{label}.{kind}.i{k}.r*.json")):
        r = report.load_result(path)
        if r is not None and r.get("errors") == 0:
            out[int(re.search(r"\.r(\d+)\.json$", path).group(1))] = r["ops_per_sec"]
    return out


def write_cost(a, rows_by_k):
    """Per in flight, kind and write workload: (with, without, change of the
    medians, [change in each round])."""
    out = []
    for k, rows in rows_by_k:
        per = {w: p for w, p, _ in rows}
        for with_obs, without in WRITE_PAIRS:
            if with_obs not in per or without not in per:
                continue
            for kind in report.SERVERS:
                x, y = per[with_obs][kind]["ops"], per[without][kind]["ops"]
                if x is None or not y:
                    continue
                rx = round_ops(a.work_dir, with_obs, kind, k)
                ry = round_ops(a.work_dir, without, kind, k)
                each = [rx[r] / ry[r] - 1 for r in sorted(rx) if ry.get(r)]
                out.append((k, kind, with_obs.split("-")[0], x, y, x / y - 1, each))
    return out


def memory_section(a):
    out = [
        "### Memory per member",
        "",
        "Resident set (VmRSS) of each member once its ensemble served (idle) and after the "
        "last run, and its peak over the whole run (VmHWM), in MiB; the role is what `srvr` "
        "reported then.",
        "",
        "| ensemble | member | role | RSS idle | RSS after the runs | peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    any_row = False
    for ens, name in ENSEMBLES:
        idle = {m["member"]: m for m in ensemble_report.read_memory(a.work_dir, ens, "idle")}
        for m in ensemble_report.read_memory(a.work_dir, ens, "end"):
            i = idle.get(m["member"], {})
            mib = lambda k: "–" if k is None else f"{k / 1024:.0f}"  # noqa: E731
            out.append(
                f"| {name} | {m['member']} | {m['mode']} | {mib(i.get('rss_kib'))} "
                f"| {mib(m['rss_kib'])} | {mib(m['hwm_kib'])} |"
            )
            any_row = True
    return out if any_row else []


def cmd_report(a):
    m = report.machine(a.work_dir)
    v = report.versions(a)
    labels = [x for x in a.labels.split(",") if x]
    uptime = ""
    try:
        uptime = open(os.path.join(a.work_dir, "uptime")).read().strip()
    except OSError:
        pass
    out = [
        SECTION,
        "",
        "Measured by `benches/run compare --mode observers` (`benches/scripts/observers.sh`): "
        "Apache ZooKeeper 3.8 and rzk, each as 3 voters + 2 observers and, beside them, as 3 "
        "voters alone (for what the observers cost the voters' writes); all four ensembles "
        "run at once on this one machine, started from their own zoo.cfg files and `myid`, "
        "and driven by the same generator with the same settings. Each ensemble has its "
        "own 127.0.E.0/24 and member N listens on 127.0.E.N: ZooKeeper's observer dials a "
        "voter at the address of its `server.N` line with the observer's own "
        "`observerMasterPort`, so on one host the members need distinct addresses.",
        "",
        f"Run {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; machine: "
        f"{m['nproc']} cores ({m['cpu']}), {m['mem']} RAM, {m['disk']}; load average "
        f"(1/5/15 min) at the {uptime.replace(chr(10), ', at the ')}; {m['load']} when the "
        "report was written; the load at each run is in the tables.",
        "",
    ] + report.command_lines(a, v) + [
        f"Apache ZooKeeper {v['zk']} (Debian package), QuorumPeerMain on {v['java']}, JVM flags "
        f"`{a.zk_jvm}` per member. Every member of every ensemble: tickTime=2000, initLimit=10, "
        f"syncLimit=5, forceSync=yes (fsync on), snapCount={a.snap_count}, maxClientCnxns=0, "
        "4lw.commands.whitelist=*, `observerMasterPort` (one port per ensemble, on every "
        "member), observers with `peerType=observer` and `:observer` on their `server.N` lines. "
        f"rzk: {rzk_observer_mode(a.work_dir)}.",
        "",
        "Roles after start-up (`srvr`), with what `mntr` says about observers:",
        "",
    ]
    for ens, name in ENSEMBLES:
        st = member_states(a.work_dir, ens, "start")
        if st:
            out.append(f"- {name}: " + "; ".join(
                f"m{n} {mode}" + (f" ({', '.join(obs)})" if obs else "") for n, mode, obs in st))
    out += [
        "",
        "### Throughput, latency and server CPU per operation",
        "",
        (f"Warm-up (not counted): every run once for {a.warmup_seconds} s on each ensemble. "
         if a.warmup_seconds else "No warm-up. ")
        + f"Each run lasted {a.seconds} s, {a.rounds} round(s), alternating which server goes "
        "first; figures are medians over the rounds. One rzk-bench per run with the connect "
        f"string of the members it loads: {a.sessions} sessions, session i on the i-th of them "
        f"modulo their number; {a.value_bytes}-byte values. Latency in ms. \"CPU µs/op\" is the "
        "CPU time (user + sys, /proc/<pid>/stat) of **every member of the ensemble together** "
        "(observers included) over the timed phase, per operation answered. \"load\" is the "
        "1-minute load average when the runs of the row started (both servers, every round).",
    ]
    problems_all = []
    rows_by_k = []
    for k in report.inflights_of(a):
        t, rows, problems = table(a, labels, k)
        problems_all += problems
        rows_by_k.append((k, rows))
        out += ["", f"**{k} request(s) in flight per session** ({a.sessions} sessions):", ""] + t
    if problems_all:
        out += ["", "Runs left out because they failed: " + "; ".join(problems_all) + "."]
    cost = write_cost(a, rows_by_k)
    if cost:
        out += [
            "",
            "### What the two observers cost the voters' writes",
            "",
            "Write throughput with the sessions on the three voters, with the two observers "
            "attached against the 3-voter ensemble without them (the runs above; each "
            "with-observers run ran next to its without-run). \"change\" compares the medians; "
            "\"per round\" compares the two runs of each round.",
            "",
            "| in flight | server | workload | with observers ops/s | without ops/s | change "
            "| per round |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, kind, w, x, y, ch, each in cost:
            out.append(f"| {k} | {'ZooKeeper' if kind == 'zookeeper' else 'rzk'} | {w} "
                       f"| {report.fmt_num(x)} | {report.fmt_num(y)} | {100 * ch:+.1f} % "
                       f"| {', '.join(f'{100 * e:+.0f} %' for e in each) or '–'} |")
    mem = memory_section(a)
    if mem:
        out += [""] + mem
    goals = []
    for k, rows in rows_by_k:
        rs = [(w, p["rzk"]["ops"] / p["zookeeper"]["ops"]) for w, p, _ in rows
              if w in READS and p["rzk"]["ops"] and p["zookeeper"]["ops"]]
        if rs:
            goals.append(
                f"| reads ≥ {GOAL_READS:.0f}× ZooKeeper's on the same topology | {k} | "
                + ", ".join(f"{w} {x:.2f}×" for w, x in rs)
                + f" | {'yes' if all(x >= GOAL_READS for _, x in rs) else 'no'} |")
        cs = [(w, ch) for kk, kind, w, _, _, ch, _ in cost if kk == k and kind == "rzk"]
        if cs:
            goals.append(
                f"| observers cost rzk's voters ≤ {100 * GOAL_WRITE_COST:.0f} % of write throughput "
                f"| {k} | " + ", ".join(f"{w} {100 * ch:+.1f} %" for w, ch in cs)
                + f" | {'yes' if all(ch >= -GOAL_WRITE_COST for _, ch in cs) else 'no'} |")
    if goals:
        out += ["", "### Goals of issue 12 in this run", "",
                "| goal | in flight | measured | met |", "|---|---|---|---|"] + goals
    print("\n".join(out).rstrip() + "\n")
    return 0


def cmd_write(a):
    # New: right after the ensemble comparison, else at the end.
    ensemble_report.write_section(a.bench, a.section, SECTION, AFTER)
    return 0


def main():
    a = report.parse_args(("work-dir", "command", "zk-jvm", "rzk-bin", "labels", "inflights"),
                          ("warmup-seconds", "snap-count", "rounds", "seconds", "sessions", "value-bytes"))
    return {"report": cmd_report, "write": cmd_write}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
