#!/usr/bin/env python3
"""The report of `benches/run compare --mode ensemble` (benches/scripts/ensemble.sh).

    ensemble_report.py report ...          the Markdown section (stdout)
    ensemble_report.py write BENCH SECTION replaces (or adds) the section in BENCH

Reads the same result files as the standalone report (runs/W.KIND.iK.rR.json, one
rzk-bench run against all three members of KIND's ensemble, server CPU summed over
them) and mem/KIND.{idle,end}.jsonl (each member's role, VmRSS and VmHWM). Uses the
standalone report's helpers (report.py, beside this file). Standard library only.
"""

import datetime as dt
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (benches/scripts/report.py)

SECTION = "## rzk vs Apache ZooKeeper 3.8 (ensemble of 3)"
# The standalone section this one follows in BENCHMARKS.md when it is new.
AFTER = report.SECTION

# The ensemble's goals, by the kind of workload. Reads are served by the member a
# session is on; writes (and session create/close) go through the leader.
WRITES = ("create", "set", "delete", "multi")
READS = ("get", "exists", "children")
GOAL_WRITES = 3.0
GOAL_READS = 2.0
GOAL_P99 = 1 / 3


def read_memory(work_dir, kind, label):
    path = os.path.join(work_dir, "mem", f"{kind}.{label}.jsonl")
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def throughput_tables(a):
    workloads = [w for w in a.workloads.split(",") if w]
    tables, problems = [], []
    for k in report.inflights_of(a):
        rows, probs = report.throughput_rows(a.work_dir, workloads, k)
        problems += probs
        if any(per[s]["n"] for _, per, _ in rows for s in report.SERVERS):
            tables.append((k, rows))
    return tables, problems


def throughput_section(a, tables, problems):
    out = [
        "### Throughput, latency and server CPU per operation",
        "",
        (f"Warm-up (not counted): every workload once for {a.warmup_seconds} s on each ensemble. "
         if a.warmup_seconds else "No warm-up. ")
        + f"Each workload ran {a.rounds} time(s) on each ensemble for {a.seconds} s, alternating "
        "which ensemble goes first, at each number of requests in flight per session; figures are "
        f"medians over the rounds. One rzk-bench per run with the connect string of all three "
        f"members: {a.sessions} sessions, session i on member i mod 3; {a.value_bytes}-byte values "
        "(watch: 100 watcher sessions spread the same way, the writer on member 1; storm: one op = "
        "connect + closeSession, spread the same way). Latency in ms. \"CPU µs/op\" is the CPU "
        "time (user + sys, /proc/<pid>/stat) of the **three members together** over the timed "
        "phase, per operation answered. \"gen CPU\" is the generator's share of the machine.",
    ]
    for k, rows in tables:
        out += [
            "",
            f"**{k} request(s) in flight per session** ({a.sessions} sessions over 3 members):",
            "",
            "| workload | ZooKeeper ops/s | rzk ops/s | rzk/ZK | ratio range | ZK p50 | rzk p50 "
            "| ZK p99 | rzk p99 | p99 rzk/ZK | ZK CPU µs/op | rzk CPU µs/op | CPU rzk/ZK "
            "| gen CPU ZK | gen CPU rzk |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for w, per, ratios in rows:
            z, r = per["zookeeper"], per["rzk"]
            rng = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "–"
            cpu = lambda x: "–" if x is None else f"{100 * x:.0f}%"  # noqa: E731
            out.append(
                f"| {w} | {report.fmt_num(z['ops'])} | {report.fmt_num(r['ops'])} "
                f"| {report.fmt_ratio(r['ops'], z['ops'])} | {rng} | {report.fmt_ms(z['p50'])} "
                f"| {report.fmt_ms(r['p50'])} | {report.fmt_ms(z['p99'])} | {report.fmt_ms(r['p99'])} "
                f"| {report.fmt_ratio(r['p99'], z['p99'])} | {report.fmt_us(z['srv'])} "
                f"| {report.fmt_us(r['srv'])} | {report.fmt_ratio(r['srv'], z['srv'])} "
                f"| {cpu(z['cpu'])} | {cpu(r['cpu'])} |"
            )
    if problems:
        out += ["", "Runs left out because they failed: " + "; ".join(problems) + "."]
    return out


def memory_section(a):
    out = [
        "### Memory per member",
        "",
        "Resident set (VmRSS) of each member once all three served (idle) and after the last run, "
        "and its peak over the whole run (VmHWM), in MiB; the role is what `srvr` reported then.",
        "",
        "| ensemble | member | role | RSS idle | RSS after the runs | peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    any_row = False
    for kind, label in (("zookeeper", "ZooKeeper"), ("rzk", "rzk")):
        idle = {m["member"]: m for m in read_memory(a.work_dir, kind, "idle")}
        for m in read_memory(a.work_dir, kind, "end"):
            i = idle.get(m["member"], {})
            mib = lambda k: "–" if k is None else f"{k / 1024:.0f}"  # noqa: E731
            out.append(
                f"| {label} | {m['member']} | {m['mode']} | {mib(i.get('rss_kib'))} "
                f"| {mib(m['rss_kib'])} | {mib(m['hwm_kib'])} |"
            )
            any_row = True
    return out if any_row else None


def goals_section(tables):
    def ratios(rows, names):
        return [
            (w, per["rzk"]["ops"] / per["zookeeper"]["ops"])
            for w, per, _ in rows
            if w in names and per["rzk"]["ops"] and per["zookeeper"]["ops"]
        ]

    out = [
        "### Goals of issue 11 in this run",
        "",
        f"Writes are {', '.join(WRITES)}; reads are {', '.join(READS)}. A goal is met at a number "
        "in flight when every workload of its kind meets it there.",
        "",
        "| goal | in flight | measured | met |",
        "|---|---|---|---|",
    ]
    for k, rows in tables:
        for goal, names, want in (
            (f"writes ≥ {GOAL_WRITES:.0f}× ZooKeeper's throughput", WRITES, GOAL_WRITES),
            (f"reads ≥ {GOAL_READS:.0f}× ZooKeeper's throughput", READS, GOAL_READS),
        ):
            rs = ratios(rows, names)
            if rs:
                meas = ", ".join(f"{w} {x:.2f}×" for w, x in rs)
                out.append(f"| {goal} | {k} | {meas} | {'yes' if all(x >= want for _, x in rs) else 'no'} |")
        ps = [
            (w, per["rzk"]["p99"] / per["zookeeper"]["p99"])
            for w, per, _ in rows
            if per["rzk"]["p99"] and per["zookeeper"]["p99"]
        ]
        if ps:
            meas = ", ".join(f"{w} {x:.2f}" for w, x in ps)
            ok = "yes" if all(x <= GOAL_P99 for _, x in ps) else "no"
            out.append(f"| p99 ≤ 1/3 of ZooKeeper's (rzk/ZK) | {k} | {meas} | {ok} |")
    return out


def cmd_report(a):
    m = report.machine(a.work_dir)
    v = report.versions(a)
    tables, problems = throughput_tables(a)
    out = [
        SECTION,
        "",
        "Measured by `benches/run compare --mode ensemble` (`benches/scripts/ensemble.sh`): three "
        "Apache ZooKeeper members and three rzk members on this one machine, each started from "
        "its own zoo.cfg (the same `server.N` lines) and `myid`, driven by the same generator "
        "with the same settings. All six processes, and the generator, share the machine's "
        "cores and one disk, so this measures the cost of replication on one host, not a "
        "network; the ratios are the point.",
        "",
        f"Run {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; machine: "
        f"{m['nproc']} cores ({m['cpu']}), {m['mem']} RAM, {m['disk']}; load average "
        f"{m['load']} when the report was written.",
        "",
    ] + report.command_lines(a, v) + [
        f"Apache ZooKeeper {v['zk']} (Debian package), QuorumPeerMain on {v['java']}, JVM flags "
        f"`{a.zk_jvm}` per member. Every member of both: tickTime=2000, initLimit=10, syncLimit=5, "
        f"forceSync=yes (fsync on), snapCount={a.snap_count}, maxClientCnxns=0, "
        "4lw.commands.whitelist=*, 127.0.0.1 only, data dirs side by side on the disk above.",
        "",
    ]
    out += throughput_section(a, tables, problems) + [""]
    mem = memory_section(a)
    if mem:
        out += mem + [""]
    if tables:
        out += goals_section(tables) + [""]
    print("\n".join(out).rstrip() + "\n")
    return 0


def write_section(bench, section_file, section, after):
    """Puts the text of `section_file` (a `## ` section) into `bench` in place of
    the section titled `section`; a new one goes right after the section titled
    `after`, else at the end. Used by observers_report.py too."""
    with open(bench) as f:
        doc = f.read()
    with open(section_file) as f:
        new = f.read().rstrip() + "\n"
    start = doc.find("\n" + section + "\n")
    if start >= 0:
        start += 1
        nxt = doc.find("\n## ", start + len(section))
        end = len(doc) if nxt < 0 else nxt + 1
        doc = doc[:start] + new + ("\n" + doc[end:] if end < len(doc) else "")
    else:
        at = doc.find("\n" + after + "\n")
        nxt = doc.find("\n## ", at + 1 + len(after)) if at >= 0 else -1
        if nxt < 0:
            doc = doc.rstrip() + "\n\n" + new
        else:
            doc = doc[: nxt + 1] + new + "\n" + doc[nxt + 1:]
    with open(bench, "w") as f:
        f.write(doc)


def cmd_write(a):
    # New: right after the standalone comparison, else at the end.
    write_section(a.bench, a.section, SECTION, AFTER)
    return 0


def main():
    a = report.parse_args(("work-dir", "command", "zk-jvm", "rzk-bin", "workloads", "inflights"),
                          ("warmup-seconds", "snap-count", "rounds", "seconds", "sessions", "value-bytes"))
    return {"report": cmd_report, "write": cmd_write}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
