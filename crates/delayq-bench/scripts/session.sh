#!/usr/bin/env bash
# Runs the README's benchmark session: three interleaved repetitions of the Redis
# ceiling (pipeline 1 and 64), the HTTP floor (refused /push requests) on Redis, W1
# /push and /push/batch and W2 on Redis with the store on SQLite, and the same three
# with the store on MariaDB; then W1 and W2 on the embedded server; W1 (single and
# batch) and W2 over gRPC on Redis, once each; W3 and W4 on Redis, and on Redis +
# MariaDB; the flow workload (pushes and strict consumers at once) on Redis +
# MariaDB. W2 consumers finish what they popped before popping again (W2 of
# docs/benchmarks.md). Every server is fresh and every Redis and MariaDB database
# emptied before its run (the Redis is FLUSHALLed: use one that holds nothing else).
#
# Usage: session.sh [OUT_DIR]   (default ./bench-session; one .json and .txt per run)
# Environment: REDIS_URL (default redis://127.0.0.1:6379), MYSQL_URL (default
# mysql://root@127.0.0.1:3306/delayq_bench; its database is dropped and created),
# DELAYQ_BIN and BENCH_BIN as for on-fresh-server.sh. PEER_CMD, when set, is a shell
# command run once per repetition right after the ceiling, on the emptied Redis, with the
# repetition's number as $1: a peer's driver for the same workloads, so that the peer is
# measured interleaved with delayq (no peer ships with delayq). Its output goes to
# peer-<rep>.txt and is printed; lines of the form `<peer> single: jobs_per_s=N` and
# `<peer> batch: jobs_per_s=N` are the peer's rates. PEER_ONCE_CMD, when set, runs once
# after delayq's W3 and W4, on the emptied Redis, into peer-once.txt: the peer's W3 and W4
# (lines `<peer> memory: bytes_per_job=N` and `<peer> burst: drain_ms=N`;
# crates/delayq-bench/peers/peer-once.sh runs BullMQ's). At the end, `delayq-bench summarize`
# prints every series as median (min-max) and the push rates divided by the ceiling and
# the peer of the same repetition, and writes summary.json.
set -euo pipefail

root="$(cd "$(dirname "$0")/../../.." && pwd)"
S="$root/crates/delayq-bench/scripts/on-fresh-server.sh"
B="${BENCH_BIN:-$root/target/release/delayq-bench}"
R="${REDIS_URL:-redis://127.0.0.1:6379}"
M="${MYSQL_URL:-mysql://root@127.0.0.1:3306/delayq_bench}"
out="${1:-bench-session}"
mkdir -p "$out"

redis_host_port="${R#redis://}"
flush_redis() { redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" flushall >/dev/null; }
fresh_mysql() {
  local rest="${M#mysql://}" database="${M##*/}"
  local user="${rest%%@*}" host_port="${rest#*@}"
  host_port="${host_port%%/*}"
  mariadb -u"$user" -h"${host_port%:*}" -P"${host_port##*:}" \
    -e "DROP DATABASE IF EXISTS \`$database\`; CREATE DATABASE \`$database\`"
}
run() { # run <name> <command...>: one measurement, its table in <name>.txt
  local name=$1; shift
  "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1 || { echo "$name failed:"; cat "$out/$name.txt"; exit 1; }
  echo "$name: $(grep -E '^  (jobs_per_s|lateness_ms_p99|lateness_ms_max|redis_used_memory_bytes_per_job|drain_ms|finish_jobs_per_s|unfinished_at_push_end|unreceived_at_push_end|in_hand_at_push_end) ' "$out/$name.txt" | tr -s ' ' | tr '\n' ' ')"
}

for rep in 1 2 3; do
  flush_redis; run "ceiling1-$rep" "$B" ceiling --redis "$R"
  flush_redis; run "ceiling64-$rep" "$B" ceiling --redis "$R" --pipeline 64
  flush_redis; run "floor-$rep" env DELAYQ_REDIS_URL="$R" "$S" floor --redis-url "$R"
  if [ -n "${PEER_CMD:-}" ]; then
    flush_redis
    bash -c "$PEER_CMD" peer "$rep" >"$out/peer-$rep.txt" 2>&1 || { echo "peer failed:"; cat "$out/peer-$rep.txt"; exit 1; }
    echo "peer-$rep: $(tr '\n' ' ' <"$out/peer-$rep.txt")"
  fi
  flush_redis; run "push-single-$rep" env DELAYQ_REDIS_URL="$R" "$S" push --mode single --redis-url "$R"
  flush_redis; run "push-batch-$rep" env DELAYQ_REDIS_URL="$R" "$S" push --mode batch --redis-url "$R"
  flush_redis; run "lateness-$rep" env DELAYQ_REDIS_URL="$R" "$S" lateness --redis-url "$R"
  fresh_mysql; flush_redis
  run "push-single-mariadb-$rep" env DELAYQ_REDIS_URL="$R" DELAYQ_DATABASE_URL="$M" "$S" push --mode single --redis-url "$R"
  fresh_mysql; flush_redis
  run "push-batch-mariadb-$rep" env DELAYQ_REDIS_URL="$R" DELAYQ_DATABASE_URL="$M" "$S" push --mode batch --redis-url "$R"
  fresh_mysql; flush_redis
  run "lateness-mariadb-$rep" env DELAYQ_REDIS_URL="$R" DELAYQ_DATABASE_URL="$M" "$S" lateness --redis-url "$R"
done
run embedded-push-single "$S" push --mode single
run embedded-push-batch "$S" push --mode batch
run embedded-lateness "$S" lateness
flush_redis; run grpc-push-single env DELAYQ_REDIS_URL="$R" "$S" push --mode single --transport grpc --redis-url "$R"
flush_redis; run grpc-push-batch env DELAYQ_REDIS_URL="$R" "$S" push --mode batch --transport grpc --redis-url "$R"
flush_redis; run grpc-lateness env DELAYQ_REDIS_URL="$R" "$S" lateness --transport grpc --redis-url "$R"
flush_redis; run memory env DELAYQ_REDIS_URL="$R" "$S" memory --redis-url "$R"
flush_redis; run memory-1m env DELAYQ_REDIS_URL="$R" "$S" memory --n 1000000 --redis-url "$R"
flush_redis; run burst env DELAYQ_REDIS_URL="$R" "$S" burst --redis-url "$R"
fresh_mysql; flush_redis
run memory-mariadb env DELAYQ_REDIS_URL="$R" DELAYQ_DATABASE_URL="$M" "$S" memory --redis-url "$R"
fresh_mysql; flush_redis
run burst-mariadb env DELAYQ_REDIS_URL="$R" DELAYQ_DATABASE_URL="$M" "$S" burst --redis-url "$R"
if [ -n "${PEER_ONCE_CMD:-}" ]; then
  flush_redis
  bash -c "$PEER_ONCE_CMD" >"$out/peer-once.txt" 2>&1 || { echo "peer failed:"; cat "$out/peer-once.txt"; exit 1; }
  echo "peer-once: $(tr '\n' ' ' <"$out/peer-once.txt")"
fi
fresh_mysql; flush_redis
run flow-mariadb env DELAYQ_REDIS_URL="$R" DELAYQ_DATABASE_URL="$M" "$S" flow --redis-url "$R"
echo
"$B" summarize "$out" --json "$out/summary.json"
