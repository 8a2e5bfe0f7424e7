#!/usr/bin/env bash
# Runs every test of the workspace against real services.
#
# Makes sure each service the tests need is installed and running on
# 127.0.0.1 (installing it with apt-get when missing), exports the
# DELAYQ_TEST_* variables, and runs the whole workspace's tests with
# DELAYQ_TEST_REQUIRE_SERVICES=1, so a test that cannot reach its service
# fails instead of skipping. Fails loudly when a service cannot be started.
set -euo pipefail
cd "$(dirname "$0")/.."

REDIS_PORT=6379
CLUSTER_PORTS=(7101 7102 7103)
CLUSTER_DIR=${DELAYQ_CLUSTER_DIR:-/tmp/delayq-redis-cluster}
ZK_PORT=2181

log() { printf '[test.sh] %s\n' "$*" >&2; }
die() { printf '[test.sh] FATAL: %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # wait_for <seconds> <description> <command...>
  local seconds=$1 what=$2; shift 2
  for _ in $(seq 1 $((seconds * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  die "$what did not come up within ${seconds}s"
}

apt_install() { # apt_install <command-or-path> <package>
  if command -v "$1" >/dev/null 2>&1 || [ -e "$1" ]; then return 0; fi
  log "installing $2"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null || die "cannot install $2"
  fi
}

ensure_redis() {
  apt_install redis-server redis-server
  apt_install redis-benchmark redis-tools # the benchmark tool's ceiling runs it
  if ! redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then
    log "starting redis on $REDIS_PORT"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
    wait_for 20 "redis" sh -c "redis-cli -p $REDIS_PORT ping | grep -q PONG"
  fi
}

ensure_redis_cluster() {
  local first=${CLUSTER_PORTS[0]}
  if redis-cli -p "$first" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then return 0; fi
  log "starting a ${#CLUSTER_PORTS[@]}-master redis cluster on ports ${CLUSTER_PORTS[*]}"
  mkdir -p "$CLUSTER_DIR"
  for port in "${CLUSTER_PORTS[@]}"; do
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    rm -f "$CLUSTER_DIR/nodes-$port.conf"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --cluster-enabled yes \
      --cluster-config-file "nodes-$port.conf" --cluster-node-timeout 5000 --save "" --appendonly no \
      --dir "$CLUSTER_DIR" --logfile "$CLUSTER_DIR/redis-$port.log" --pidfile "$CLUSTER_DIR/redis-$port.pid"
  done
  for port in "${CLUSTER_PORTS[@]}"; do
    wait_for 20 "redis cluster node $port" sh -c "redis-cli -p $port ping | grep -q PONG"
  done
  local nodes=()
  for port in "${CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null \
    || die "redis-cli --cluster create failed"
  wait_for 30 "redis cluster state ok" sh -c "redis-cli -p $first cluster info | grep -q cluster_state:ok"
}

ensure_mariadb() {
  apt_install mariadbd mariadb-server
  if ! mariadb -uroot -h127.0.0.1 -e 'select 1' >/dev/null 2>&1; then
    log "starting mariadb"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    wait_for 60 "mariadb" mariadb -uroot -h127.0.0.1 -e 'select 1'
  fi
  mariadb -uroot -h127.0.0.1 -e 'CREATE DATABASE IF NOT EXISTS test' || die "cannot create database test"
}

ensure_rabbitmq() {
  apt_install rabbitmq-server rabbitmq-server
  if ! port_open 5672; then
    log "starting rabbitmq"
    rabbitmq-server -detached >/dev/null 2>&1 || true
    wait_for 90 "rabbitmq" port_open 5672
  fi
}

ensure_zookeeper() {
  apt_install /usr/share/zookeeper/bin/zkServer.sh zookeeper
  if ! port_open "$ZK_PORT"; then
    log "starting zookeeper"
    /usr/share/zookeeper/bin/zkServer.sh start >/dev/null 2>&1 || die "zkServer.sh start failed"
    wait_for 60 "zookeeper" port_open "$ZK_PORT"
  fi
}

ensure_chromium() { # the console's browser tests drive it through chromedriver
  apt_install chromium chromium
  apt_install chromedriver chromium-driver
  timeout 60 chromium --headless=new --no-sandbox --disable-gpu --dump-dom about:blank >/dev/null 2>&1 \
    || die "chromium does not start headless"
}

# The beanstalkd protocol tests: a real beanstalkd to compare replies with, and two client
# libraries from the registries (greenstalk from PyPI, jackd from npm), pinned by
# tests/beanstalk/requirements.txt and tests/beanstalk/package-lock.json.
BEANSTALK_CLIENTS=${DELAYQ_BEANSTALK_CLIENTS_DIR:-/tmp/delayq-beanstalk-clients}

ensure_beanstalkd() {
  apt_install beanstalkd beanstalkd
  # Debian's package may start a daemon of its own; the tests start theirs on free ports.
  command -v beanstalkd >/dev/null || die "beanstalkd is not installed"
}

ensure_beanstalk_clients() {
  apt_install python3 python3
  apt_install node nodejs
  apt_install npm npm
  if [ ! -x "$BEANSTALK_CLIENTS/venv/bin/python" ]; then
    log "creating the python client venv in $BEANSTALK_CLIENTS/venv"
    python3 -m venv "$BEANSTALK_CLIENTS/venv" 2>/dev/null || {
      apt_install /usr/lib/python3/dist-packages/venv python3-venv
      python3 -m venv "$BEANSTALK_CLIENTS/venv" || die "cannot create a python venv"
    }
  fi
  "$BEANSTALK_CLIENTS/venv/bin/pip" install -q -r tests/beanstalk/requirements.txt \
    || die "cannot install the python beanstalk client"
  (cd tests/beanstalk && npm ci --silent --no-audit --no-fund) || die "cannot install the node beanstalk client"
}

ensure_redis
ensure_redis_cluster
ensure_mariadb
ensure_rabbitmq
ensure_zookeeper
ensure_chromium
ensure_beanstalkd
ensure_beanstalk_clients

export DELAYQ_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
DELAYQ_TEST_REDIS_CLUSTER=$(printf 'redis://127.0.0.1:%s,' "${CLUSTER_PORTS[@]}")
export DELAYQ_TEST_REDIS_CLUSTER=${DELAYQ_TEST_REDIS_CLUSTER%,}
export DELAYQ_TEST_MYSQL_URL="mysql://root@127.0.0.1:3306/test"
export DELAYQ_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:5672/%2f"
export DELAYQ_TEST_ZOOKEEPER="127.0.0.1:$ZK_PORT"
DELAYQ_TEST_CHROMEDRIVER=$(command -v chromedriver)
export DELAYQ_TEST_CHROMEDRIVER
DELAYQ_TEST_CHROMIUM=$(command -v chromium)
export DELAYQ_TEST_CHROMIUM
export DELAYQ_TEST_BEANSTALKD
DELAYQ_TEST_BEANSTALKD=$(command -v beanstalkd)
export DELAYQ_TEST_BEANSTALK_PYTHON="$BEANSTALK_CLIENTS/venv/bin/python"
DELAYQ_TEST_BEANSTALK_NODE=$(command -v node)
export DELAYQ_TEST_BEANSTALK_NODE
export DELAYQ_TEST_REQUIRE_SERVICES=1

log "services up; building the workspace tests"
cargo test --workspace --all-targets --no-run "$@"

# The run is timed apart from the build, and the slowest test binaries are named, so that a
# change which makes the suite slower shows here (docs/contributing.md says how to compare).
log "running the workspace tests"
output=$(mktemp -t delayq-test.XXXXXX)
trap 'rm -f "$output"' EXIT
started=$(date +%s)
status=0
cargo test --workspace --all-targets "$@" 2>&1 | tee "$output" || status=$?
elapsed=$(($(date +%s) - started))
log "the tests ran in ${elapsed} s, the build excluded; the slowest test binaries:"
awk '/^ *Running / { binary = $NF; gsub(/[()]/, "", binary); sub(/.*\//, "", binary); sub(/-[0-9a-f]+$/, "", binary) }
     /^test result:/ { sub(/s$/, "", $NF); print $NF, binary }' "$output" \
  | sort -rn | head -5 | while read -r seconds binary; do log "  ${seconds} s  ${binary}"; done
exit "$status"
