# Shared pieces of the CI stages (sourced by .ci/stages/*.sh, not run).
#
# Installing what a stage needs on a fresh Debian machine, and nothing when it
# is there already: each stage lists its needs, then calls apt_install.
#
#   need_pkgs zookeeper libcurator-framework-java   # Debian packages (dpkg -s)
#   need_cmd javac default-jdk-headless             # a command, and its package
#   need_file /usr/share/java/zookeeper.jar zookeeper
#   need_zookeeper                                  # Apache ZooKeeper 3.8, zkCli.sh, java
#   need_python_venv                                # python3 with venv and ensurepip
#   apt_install 40-interop                          # installs what is missing, if anything
#
# And the ensemble launcher the stages start servers with (rzk_testkit's
# rzk-ensemble, see testkit/README.md): ensemble_cli builds it (release) and
# sets RZK_ENSEMBLE.

APT_NEED=()

# need_pkgs PKG...: queues each Debian package that is not installed.
need_pkgs() {
  local p
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || APT_NEED+=("$p")
  done
}

# need_cmd CMD PKG: queues PKG when CMD is not on PATH.
need_cmd() {
  command -v "$1" >/dev/null 2>&1 || APT_NEED+=("$2")
}

# need_file FILE PKG...: queues the packages when FILE does not exist.
need_file() {
  local f=$1
  shift
  [ -e "$f" ] || APT_NEED+=("$@")
}

# need_zookeeper: Apache ZooKeeper 3.8's jars and zkCli.sh (Debian's zookeeper and
# zookeeper-bin) and a Java runtime.
need_zookeeper() {
  [ -f /usr/share/java/zookeeper.jar ] && [ -x /usr/share/zookeeper/bin/zkCli.sh ] ||
    APT_NEED+=(zookeeper zookeeper-bin)
  need_cmd java default-jre-headless
}

# need_python_venv: python3, with the venv and ensurepip modules (the interop
# suites' virtual environments).
need_python_venv() {
  need_cmd python3 python3
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || APT_NEED+=(python3-venv)
}

# apt_install STAGE: installs the queued packages (each once), saying so under the
# stage's name; nothing when none is queued.
apt_install() {
  [ "${#APT_NEED[@]}" -gt 0 ] || return 0
  local pkgs
  mapfile -t pkgs < <(printf '%s\n' "${APT_NEED[@]}" | awk '!seen[$0]++')
  echo "$1: installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
  APT_NEED=()
}

# ensemble_cli: builds rzk-ensemble (release) and sets RZK_ENSEMBLE to it.
ensemble_cli() {
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" cargo build --release -p rzk-testkit --bin rzk-ensemble
  RZK_ENSEMBLE="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/rzk-ensemble"
  export RZK_ENSEMBLE
}
