# Shared pieces of the benchmark scenarios (benches/scenarios/*.sh, run through
# benches/run): dependencies, binaries, the work directory and its clean-up,
# starting and stopping Apache ZooKeeper 3.8 and rzk on free loopback ports, one
# server at a time (launch, start_server, stop_server, kill_server) or as
# ensembles (start_ensemble, through the repository's ensemble launcher
# rzk-ensemble, testkit/README.md). Sourced, not run.
#
# Every process started here is recorded in STARTED_PIDS (ensembles in
# STARTED_ENSEMBLES) and stopped by PID on exit (cleanup_started); nothing else
# is ever signalled.

# The repository this script sits in (benches/scripts/ -> repo root).
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Apache ZooKeeper's classpath: the Debian jar (its manifest lists its
# dependencies) plus an slf4j binding and log4j so that the server has a log.
ZK_JARS=/usr/share/java
ZK_MAIN=org.apache.zookeeper.server.ZooKeeperServerMain

STARTED_PIDS=()
STARTED_ENSEMBLES=()
# snapCount of both servers (ZooKeeper's default; rzk's default is the same).
SNAP_COUNT=${SNAP_COUNT:-100000}

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Installs Debian's zookeeper (and java, python3) when missing. Needs root or sudo.
ensure_deps() {
  local need=()
  [ -d /usr/share/zookeeper ] && [ -f "$ZK_JARS/zookeeper.jar" ] || need+=(zookeeper zookeeper-bin)
  command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  [ ${#need[@]} -eq 0 ] && return 0
  log "installing ${need[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}"
}

# Sets RZK_BENCH_BIN and RZK_BIN. Either comes from the environment; a missing
# one is built from this repository (release), so a fresh clone works.
resolve_bins() {
  if [ -z "${RZK_BENCH_BIN:-}" ] || [ -z "${RZK_BIN:-}" ]; then
    local target="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
    log "building rzk-bench and rzk (release) in $target"
    (cd "$REPO_ROOT" && CARGO_TARGET_DIR="$target" CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
      cargo build --release -p rzk-benches -p rzk-server --bin rzk-bench --bin rzk) >&2
    RZK_BENCH_BIN="${RZK_BENCH_BIN:-$target/release/rzk-bench}"
    RZK_BIN="${RZK_BIN:-$target/release/rzk}"
  fi
  [ -x "$RZK_BENCH_BIN" ] || die "RZK_BENCH_BIN=$RZK_BENCH_BIN is not an executable"
  [ -x "$RZK_BIN" ] || die "RZK_BIN=$RZK_BIN is not an executable"
  export RZK_BENCH_BIN RZK_BIN
}

# free_port [ADDR]: a TCP port free on ADDR (default 127.0.0.1; any 127.x.y.z is
# loopback on Linux, bindable without root: benches/scripts/observers.sh gives each
# member its own address).
free_port() {
  python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' \
    "${1:-127.0.0.1}"
}

now_ns() { date +%s%N; }

# Resident set size of a process in KiB (VmRSS from /proc/<pid>/status).
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# ruok PORT [ADDR]: true if the server on ADDR:PORT (default 127.0.0.1) answers
# ruok with imok.
ruok() {
  (
    exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1" || exit 1
    printf ruok >&3
    r=""
    IFS= read -r -t 2 -n 4 r <&3 || true
    [ "$r" = imok ]
  ) 2>/dev/null
}

# work_dir PREFIX [DIR]: sets WORK_DIR to DIR (created) or to a new PREFIX.XXXXXX
# (PREFIX a path: /var/tmp/rzk-ab), and on exit stops every server started here and
# removes WORK_DIR, unless KEEP=1 (then its path is logged).
work_dir() {
  if [ -n "${2:-}" ]; then
    WORK_DIR=$2
    mkdir -p "$WORK_DIR"
  else
    WORK_DIR=$(mktemp -d "$1.XXXXXX")
  fi
  trap cleanup_work_dir EXIT
}

# The EXIT trap of work_dir.
cleanup_work_dir() {
  local rc=$?
  cleanup_started
  if [ "${KEEP:-0}" = 1 ]; then log "work dir kept: $WORK_DIR"; else rm -rf "$WORK_DIR"; fi
  exit $rc
}

# Server records, by name: SRV_KIND (zookeeper|rzk), SRV_DIR, SRV_PORT, SRV_PID, SRV_LOG,
# and SRV_EXTRA: settings added to rzk's command line (--set k=v words, one per line);
# SRV_BIN: the rzk binary when it is not RZK_BIN; SRV_DATA: rzk's data dir when it is not
# SRV_DIR/data; SRV_ADDR: the client address when it is not 127.0.0.1 (srv_addr NAME
# reads it).
declare -A SRV_KIND SRV_DIR SRV_PORT SRV_PID SRV_LOG SRV_EXTRA SRV_ADDR SRV_BIN SRV_DATA

# srv_addr NAME: the loopback address the server NAME serves clients on.
srv_addr() { printf '%s' "${SRV_ADDR[$1]:-127.0.0.1}"; }
# The JVM heap (-Xmx) of each ZooKeeper server, and whether it is committed up
# front (-Xms = -Xmx: 1) or grows as used (no -Xms, the JVM's default: 0).
declare -A ZK_HEAP_FOR ZK_XMS_FOR

# zk_jvm_flags HEAP [XMS]: the JVM flags of a ZooKeeper run (printed in the report).
# Without -Xms (XMS 0, the default) the heap grows as it is used, so the RSS
# follows what ZooKeeper needs; with -Xms = -Xmx the whole heap is committed up
# front and the RSS hardly moves.
zk_jvm_flags() {
  local xms=""
  [ "${2:-0}" = 0 ] || xms="-Xms$1 "
  printf '%s' "${xms}-Xmx$1 -XX:+UseG1GC -Dzookeeper.admin.enableServer=false"
}

# write_log4j DIR: ZooKeeper's log4j configuration in DIR/conf (everything at INFO
# to the console, which the scripts redirect to the server's log file).
write_log4j() {
  cat >"$1/conf/log4j.properties" <<'PROPS'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
PROPS
}

# prepare_zookeeper NAME DIR HEAP [XMS]: writes DIR/zoo.cfg and DIR/conf, records the server.
prepare_zookeeper() {
  local name=$1 dir=$2 heap=$3 xms=${4:-0} port
  port=$(free_port)
  mkdir -p "$dir/data" "$dir/conf"
  cat >"$dir/zoo.cfg" <<CFG
tickTime=2000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
4lw.commands.whitelist=*
admin.enableServer=false
snapCount=$SNAP_COUNT
forceSync=yes
CFG
  write_log4j "$dir"
  SRV_KIND[$name]=zookeeper SRV_DIR[$name]=$dir SRV_PORT[$name]=$port SRV_LOG[$name]=$dir/server.log
  ZK_HEAP_FOR[$name]=$heap ZK_XMS_FOR[$name]=$xms
}

# prepare_rzk NAME DIR [KEY=VALUE...]: records an rzk server with its data dir under
# DIR; the settings are added to its command line (after the common ones).
prepare_rzk() {
  local name=$1 dir=$2 port kv
  shift 2
  port=$(free_port)
  mkdir -p "${SRV_DATA[$name]:-$dir/data}"
  SRV_KIND[$name]=rzk SRV_DIR[$name]=$dir SRV_PORT[$name]=$port SRV_LOG[$name]=$dir/server.log
  SRV_EXTRA[$name]=""
  for kv in "$@"; do SRV_EXTRA[$name]+=$'--set\n'"$kv"$'\n'; done
}

# The argv of a recorded server, one word per line (into an array with mapfile).
server_argv() {
  local name=$1 dir=${SRV_DIR[$1]}
  case ${SRV_KIND[$name]} in
  zookeeper)
    local cp="$dir/conf:$ZK_JARS/zookeeper.jar:$ZK_JARS/slf4j-log4j12.jar:$ZK_JARS/log4j-1.2.jar"
    # shellcheck disable=SC2086
    printf '%s\n' java $(zk_jvm_flags "${ZK_HEAP_FOR[$name]}" "${ZK_XMS_FOR[$name]:-0}") \
      "-Dlog4j.configuration=file:$dir/conf/log4j.properties" -cp "$cp" "$ZK_MAIN" "$dir/zoo.cfg"
    ;;
  rzk)
    printf '%s\n' "${SRV_BIN[$name]:-$RZK_BIN}" --client-port "${SRV_PORT[$name]}" --client-port-address 127.0.0.1 \
      --data-dir "${SRV_DATA[$name]:-$dir/data}" --set tickTime=2000 --set maxClientCnxns=0 \
      --set '4lw.commands.whitelist=*' --set "snapCount=$SNAP_COUNT" --set forceSync=yes
    printf '%s' "${SRV_EXTRA[$name]:-}"
    ;;
  esac
}

# launch NAME T0FILE [ARG...]: starts the server in the background (its command line,
# then ARGs: rzk's --set k=v of this start only), appending to its log; the wall clock
# in ns just before exec is written to T0FILE. Sets SRV_PID[NAME].
launch() {
  local name=$1 t0file=$2 argv
  shift 2
  mapfile -t argv < <(server_argv "$name")
  argv+=("$@")
  # The subshell writes the time and then execs, so the PID is the server's own.
  NO_COLOR=1 RUST_LOG="${RZK_LOG:-info}" bash -c 'date +%s%N >"$1"; shift; exec "$@"' _ "$t0file" \
    "${argv[@]}" >>"${SRV_LOG[$name]}" 2>&1 </dev/null &
  SRV_PID[$name]=$!
  STARTED_PIDS+=("$!")
}

# wait_serving NAME [rzk-bench wait-serving args...]: waits until the server serves
# a session and a read (rzk-bench wait-serving); fails with the log tail if the
# server exits or the deadline passes. Prints wait-serving's stdout (elapsed ms).
wait_serving() {
  local name=$1
  shift
  local out
  if ! out=$("$RZK_BENCH_BIN" wait-serving --server "$(srv_addr "$name"):${SRV_PORT[$name]}" "$@"); then
    log "$name (${SRV_KIND[$name]}, pid ${SRV_PID[$name]}) did not start serving; log tail:"
    tail -30 "${SRV_LOG[$name]}" >&2
    return 1
  fi
  printf '%s\n' "$out"
}

# start_server NAME: launches and waits until it serves (deadline 120 s).
start_server() {
  local name=$1
  launch "$name" "${SRV_DIR[$name]}/t0"
  # ruok first (cheap, and notices a server that died at once), then a real session.
  local deadline=$(($(date +%s) + 120))
  until ruok "${SRV_PORT[$name]}"; do
    if ! kill -0 "${SRV_PID[$name]}" 2>/dev/null; then
      log "$name (${SRV_KIND[$name]}) exited during startup; log tail:"
      tail -30 "${SRV_LOG[$name]}" >&2
      return 1
    fi
    [ "$(date +%s)" -lt $deadline ] || { log "$name: no imok within 120 s"; return 1; }
    sleep 0.05
  done
  wait_serving "$name" --timeout-seconds 120 >/dev/null
  log "$name: ${SRV_KIND[$name]} serving on 127.0.0.1:${SRV_PORT[$name]} (pid ${SRV_PID[$name]})"
}

# stop_pid PID [SECONDS]: SIGTERM, wait for the exit (deadline), then SIGKILL.
stop_pid() {
  local pid=$1 secs=${2:-60} i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < secs * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid did not exit within ${secs} s of SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# stop_server NAME: graceful stop, waits until the process has exited.
stop_server() {
  local name=$1
  [ -n "${SRV_PID[$name]:-}" ] || return 0
  if [ -n "${SRV_ENSEMBLE[$name]:-}" ]; then
    "$RZK_ENSEMBLE" term --dir "${SRV_ENSEMBLE[$name]}" "${SRV_MEMBER[$name]}" --grace 120 2>/dev/null
  else
    stop_pid "${SRV_PID[$name]}" 120
  fi
  SRV_PID[$name]=""
}

# kill_server NAME: SIGKILL (a crash), waits until the process has exited.
kill_server() {
  local name=$1
  [ -n "${SRV_PID[$name]:-}" ] || return 0
  kill -KILL "${SRV_PID[$name]}" 2>/dev/null || true
  wait "${SRV_PID[$name]}" 2>/dev/null || true
  SRV_PID[$name]=""
}

# The EXIT trap: stops every process this script started, by PID.
cleanup_started() {
  local pid dir
  for pid in "${STARTED_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && stop_pid "$pid" 20
  done
  for dir in "${STARTED_ENSEMBLES[@]}"; do
    "$RZK_ENSEMBLE" stop --dir "$dir" --grace 20 2>/dev/null || true
  done
  return 0
}

# resolve_ensemble_cli: sets RZK_ENSEMBLE, the repository's ensemble launcher
# (testkit/README.md): from the environment, or built from this repository (release).
resolve_ensemble_cli() {
  if [ -z "${RZK_ENSEMBLE:-}" ]; then
    local target="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
    (cd "$REPO_ROOT" && CARGO_TARGET_DIR="$target" CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
      cargo build --release -p rzk-testkit --bin rzk-ensemble) >&2
    RZK_ENSEMBLE="$target/release/rzk-ensemble"
  fi
  [ -x "$RZK_ENSEMBLE" ] || die "RZK_ENSEMBLE=$RZK_ENSEMBLE is not an executable"
  export RZK_ENSEMBLE
}

# The members of ensembles, by record name: the ensemble's directory and the member's id.
declare -A SRV_ENSEMBLE SRV_MEMBER

# start_ensemble NAME DIR KIND [rzk-ensemble start options...]: starts an ensemble of KIND
# (rzk: RZK_BIN unless the options name --rzk; zookeeper: the Debian jars) in DIR with
# rzk-ensemble, which writes every member's zoo.cfg and myid, starts them and waits
# until they have settled; then records member N as NAME-mN (SRV_*: its port, address,
# pid, log) and waits until each serves a session and a read (rzk-bench wait-serving).
start_ensemble() {
  local name=$1 dir=$2 kind=$3 program=() line id client pid log n
  shift 3
  resolve_ensemble_cli
  case $kind in
  rzk) [[ " $* " == *" --rzk "* ]] || program=(--rzk "$RZK_BIN") ;;
  zookeeper) program=(--zookeeper --zookeeper-jars "$ZK_JARS") ;;
  esac
  mkdir -p "$dir"
  STARTED_ENSEMBLES+=("$dir")
  "$RZK_ENSEMBLE" start --dir "$dir" "${program[@]}" --timeout 180 "$@" >/dev/null ||
    { log "$name: the $kind ensemble did not start"; return 1; }
  while read -r id client pid log; do
    n=$name-m$id
    SRV_KIND[$n]=$kind SRV_DIR[$n]=$dir/m$id SRV_PORT[$n]=${client##*:} SRV_ADDR[$n]=${client%:*}
    SRV_PID[$n]=$pid SRV_LOG[$n]=$log SRV_ENSEMBLE[$n]=$dir SRV_MEMBER[$n]=$id
    wait_serving "$n" --timeout-seconds 180 >/dev/null </dev/null
  done < <("$RZK_ENSEMBLE" status --dir "$dir" --json | python3 -c '
import json, sys
for m in json.load(sys.stdin)["members"]:
    print(m["id"], m["client"], m["pid"], m["log"])')
}

# stop_ensemble DIR: SIGTERM to every member of the ensemble in DIR, SIGKILL after 120 s.
stop_ensemble() {
  "$RZK_ENSEMBLE" stop --dir "$1" --grace 120 2>/dev/null || true
}

# raise_nofile N: raises the soft open-files limit to N + 1024 (the servers started
# afterwards, and rzk-bench, inherit it).
raise_nofile() {
  local want=$(($1 + 1024)) hard
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
    die "ulimit -Hn is $hard; $1 sessions need $want open files (raise the hard limit or use fewer)"
  fi
  [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$want" ] && ulimit -n "$want"
  return 0
}
