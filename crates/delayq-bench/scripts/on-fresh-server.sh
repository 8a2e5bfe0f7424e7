#!/usr/bin/env bash
# Runs one delayq-bench workload against a freshly started, empty delayq server
# (docs/benchmarks.md: each workload starts from an empty server), then stops it.
#
# Usage: on-fresh-server.sh <workload> [delayq-bench flags...]
#   e.g. on-fresh-server.sh push --mode batch --repeats 3 --json w1-batch.json
# Environment: DELAYQ_BIN (default target/release/delayq), BENCH_BIN (default
# target/release/delayq-bench); any DELAYQ_* variable (e.g. DELAYQ_REDIS_URL) is
# passed to the server. --server and --server-pid are filled in, and
# DELAYQ_BENCH_GRPC_SERVER is set to the server's gRPC address (for --transport grpc).
# With DELAYQ_BENCH_SERVER_LOG set, the server's output is kept there (e.g. with
# RUST_LOG=warn,delayq_queue=debug, to see when loads and reconciliations ran).
set -euo pipefail

root="$(cd "$(dirname "$0")/../../.." && pwd)"
delayq_bin="${DELAYQ_BIN:-$root/target/release/delayq}"
bench_bin="${BENCH_BIN:-$root/target/release/delayq-bench}"
data_dir="$(mktemp -d -t delayq-bench-data.XXXXXX)"
server_out="$data_dir/server.out"

DELAYQ_HTTP_ADDR=127.0.0.1:0 DELAYQ_GRPC_ADDR="${DELAYQ_GRPC_ADDR:-127.0.0.1:0}" \
  DELAYQ_DATA_DIR="$data_dir" RUST_LOG="${RUST_LOG:-warn}" \
  "$delayq_bin" serve >"$server_out" 2>"$data_dir/server.err" &
server_pid=$!
cleanup() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  if [ -n "${DELAYQ_BENCH_SERVER_LOG:-}" ]; then
    cat "$server_out" "$data_dir/server.err" >"$DELAYQ_BENCH_SERVER_LOG" 2>/dev/null || true
  fi
  rm -rf "$data_dir"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  grep -q 'delayq listening' "$server_out" 2>/dev/null && break
  sleep 0.1
done
address="$(sed -n 's/.*delayq listening http=\([^ ]*\).*/\1/p' "$server_out")"
grpc_address="$(sed -n 's/.*delayq listening .*grpc=\([^ ]*\).*/\1/p' "$server_out")"
if [ -z "$address" ]; then
  echo "the server did not start:" >&2
  cat "$data_dir/server.err" >&2
  exit 1
fi

workload="$1"
shift
DELAYQ_BENCH_GRPC_SERVER="http://$grpc_address" "$bench_bin" "$workload" --server "http://$address" --server-pid "$server_pid" "$@"
