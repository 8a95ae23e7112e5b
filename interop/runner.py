"""Runs the interop suite against Apache ZooKeeper 3.8 and, when it exists, against rzk, and
compares the two; standalone (one server each), as an ensemble of three members each (the
suite gets a connect string of all three), through an observer (three voters and one
observer each; the suite gets the observer's address alone), or standalone and ensemble
(--mode all).

The rule for rzk: if `server/src/main.rs` does not exist, the rzk server has not been
written yet and the suite runs against Apache ZooKeeper only (this is the one case in
which rzk is skipped, and the runner says so). If it exists, `cargo build --release -p
rzk-server` must succeed and produce `target/release/rzk` (under $CARGO_TARGET_DIR when
set); a build failure is an error.

Exit status: 0 when every test passes on Apache ZooKeeper and every test that passes
there also passes on rzk; 1 when a test fails on Apache ZooKeeper (a bug in the suite) or
regresses on rzk; 2 when the suite or a server could not be run at all.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import servers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ZK = "Apache ZooKeeper"
RZK = "rzk"

# --mode: what each server is started as. The labels name the servers in the tables; the
# slug names the junit files.
MODES = {
    "standalone": {
        ZK: servers.start_zookeeper,
        RZK: servers.start_rzk,
        "suffix": "",
    },
    "ensemble": {
        ZK: servers.start_zookeeper_ensemble,
        RZK: servers.start_rzk_ensemble,
        "suffix": f" x{servers.ENSEMBLE_SIZE}",
    },
    # Three voters and one observer; the suite's connect string is the observer's alone.
    "observer": {
        ZK: servers.start_zookeeper_observer,
        RZK: servers.start_rzk_observer,
        "suffix": f" {servers.ENSEMBLE_SIZE}+{servers.OBSERVERS} via observer",
    },
}

OUTCOMES = ("passed", "failed", "error", "skipped")


class RunError(Exception):
    """The suite could not be run (as opposed to: it ran and tests failed)."""


def log(msg):
    print(f"[interop] {msg}", flush=True)


def parse_junit(path):
    """{test id: outcome} from pytest's junit XML."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "")
        test_id = f"{module.replace('.', '/')}.py::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                break
        # A test can have a passing call and a failing teardown: keep the worst.
        if results.get(test_id) not in (None, "passed"):
            continue
        results[test_id] = outcome
    return results


def run_suite(label, server, work_dir, pytest_args):
    """Runs pytest against `server`; returns {test id: outcome}."""
    slug = ("zookeeper" if label.startswith(ZK) else "rzk") + (
        "-observer" if getattr(server, "expect_mode", None) == "observer"
        else "-ensemble" if len(server.members) > 1 else ""
    )
    junit = os.path.join(work_dir, f"{slug}-junit.xml")
    if os.path.exists(junit):
        os.remove(junit)
    env = dict(os.environ)
    env.update(servers.suite_env(server))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        os.path.join(HERE, "pytest.ini"),
        "--rootdir",
        HERE,
        "-q",
        "-rfEs",
        f"--junitxml={junit}",
        *pytest_args,
    ]
    log(f"running the suite against {label} at {server.hosts}")
    started = time.monotonic()
    code = subprocess.call(cmd, cwd=HERE, env=env)
    log(f"{label}: pytest exited with {code} after {time.monotonic() - started:.0f} s")
    if code not in (0, 1) or not os.path.exists(junit):
        raise RunError(f"pytest could not run the suite against {label} (exit code {code})")
    results = parse_junit(junit)
    if not results:
        raise RunError(f"no tests ran against {label}")
    if not server.alive():
        log(f"{label} exited during the run; log {server.log_path}:\n{server.log_tail()}")
        results["<server stayed up for the whole run>"] = "failed"
    return results


def against(label, start, work_dir, pytest_args, *start_args):
    server = servers.start_with_retry(start, *start_args, work_dir)
    log(f"{label} is up on {server.hosts} (pids {server.pids}, log {server.log_path})")
    try:
        return run_suite(label, server, work_dir, pytest_args)
    finally:
        server.stop()
        server.cleanup()


def rzk_binary(args):
    """The rzk binary to test, or None when the server does not exist yet."""
    if args.rzk_bin:
        if not os.access(args.rzk_bin, os.X_OK):
            raise RunError(f"--rzk-bin {args.rzk_bin} is not an executable file")
        return os.path.abspath(args.rzk_bin)
    if not os.path.exists(os.path.join(REPO, "server", "src", "main.rs")):
        return None
    target_dir = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    env = dict(os.environ)
    env.setdefault("CARGO_BUILD_JOBS", "2")
    log("server/src/main.rs exists: building rzk (cargo build --release -p rzk-server)")
    code = subprocess.call(
        ["cargo", "build", "--release", "-p", "rzk-server"], cwd=REPO, env=env
    )
    if code != 0:
        raise RunError(f"cargo build --release -p rzk-server failed (exit code {code})")
    binary = os.path.join(target_dir, "release", "rzk")
    if not os.access(binary, os.X_OK):
        raise RunError(f"the build succeeded but {binary} does not exist")
    return binary


def counts(results):
    return {o: sum(1 for v in results.values() if v == o) for o in OUTCOMES}


def print_summary(zk_results, rzk_results, suffix=""):
    zk_label, rzk_label = ZK + suffix, RZK + suffix
    labels = [zk_label] + ([rzk_label] if rzk_results is not None else [])
    tables = [counts(zk_results)] + ([counts(rzk_results)] if rzk_results is not None else [])
    width = max(len(label) for label in labels) + 2
    print()
    print("interop results".ljust(12) + "".join(label.rjust(width) for label in labels))
    for outcome in OUTCOMES:
        print(outcome.ljust(12) + "".join(str(t[outcome]).rjust(width) for t in tables))
    print("total".ljust(12) + "".join(str(sum(t.values())).rjust(width) for t in tables))

    if rzk_results is None:
        return []
    ids = sorted(set(zk_results) | set(rzk_results))
    diffs = [
        (i, zk_results.get(i, "absent"), rzk_results.get(i, "absent"))
        for i in ids
        if zk_results.get(i) != rzk_results.get(i)
    ]
    print()
    if not diffs:
        print(f"no per-test differences between {zk_label} and {rzk_label}")
        return []
    name_width = max(len(i) for i, _, _ in diffs)
    print("differences".ljust(name_width) + f"  {zk_label:>20}  {rzk_label:>10}")
    for test_id, a, b in diffs:
        print(test_id.ljust(name_width) + f"  {a:>20}  {b:>10}")
    return [d for d in diffs if d[1] == "passed" and d[2] != "passed"]


def run_mode(mode, args, binary):
    """One mode: the suite against Apache ZooKeeper, then against rzk (when it exists).
    Returns (exit status, final counts line)."""
    starts, suffix = MODES[mode], MODES[mode]["suffix"]
    zk_label, rzk_label = ZK + suffix, RZK + suffix
    zk_results = against(zk_label, starts[ZK], args.work_dir, args.pytest_args)
    rzk_results = None
    if binary is not None:
        rzk_results = against(rzk_label, starts[RZK], args.work_dir, args.pytest_args, binary)

    regressions = print_summary(zk_results, rzk_results, suffix)
    status = 0
    zk_bad = [i for i, o in zk_results.items() if o in ("failed", "error")]
    if zk_bad:
        log(f"{mode}: {len(zk_bad)} test(s) fail against {zk_label}, the reference: the "
            "suite itself is wrong there")
        status = 1
    if regressions:
        log(f"{mode}: {len(regressions)} test(s) pass on {zk_label} but not on {rzk_label}")
        status = 1
    final = rzk_results if rzk_results is not None else zk_results
    c = counts(final)
    which = rzk_label if rzk_results is not None else zk_label
    log(f"{which}: {c['passed']} passed, {c['failed'] + c['error']} failed, "
        f"{c['skipped']} skipped")
    return status, f"{which}: {c['passed']} passed, {c['failed'] + c['error']} failed"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zookeeper-only", action="store_true",
                        help="do not build or run rzk, even if it exists")
    parser.add_argument("--rzk-bin", help="test this rzk binary instead of building one")
    parser.add_argument("--mode", choices=("standalone", "ensemble", "observer", "all"),
                        default="standalone",
                        help="one server of each (default), an ensemble of "
                        f"{servers.ENSEMBLE_SIZE} of each, {servers.ENSEMBLE_SIZE} voters and "
                        f"{servers.OBSERVERS} observer of each with the suite connected to the "
                        "observer only, or standalone and ensemble one after the other")
    parser.add_argument("--work-dir", default=os.path.join(HERE, "work"),
                        help="where logs, configs and junit files go (default interop/work)")
    parser.add_argument("pytest_args", nargs="*",
                        help="extra pytest arguments after --, e.g. -- -k watches")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    # Servers run in their own process group, so a SIGTERM to the runner would leave them
    # behind; turning it into SystemExit runs the `finally` that stops them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    modes = ["standalone", "ensemble"] if args.mode == "all" else [args.mode]
    status, lines = 0, []
    try:
        binary = None
        if args.zookeeper_only:
            log("--zookeeper-only: rzk not run")
        else:
            binary = rzk_binary(args)
            if binary is None:
                log("rzk server not available: suite run against Apache ZooKeeper only "
                    "(server/src/main.rs does not exist yet)")
        for mode in modes:
            mode_status, line = run_mode(mode, args, binary)
            status = max(status, mode_status)
            lines.append(line)
    except (RunError, servers.ServerError) as e:
        log(f"ERROR: {e}")
        return 2
    for line in lines:
        print(f"interop: {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
