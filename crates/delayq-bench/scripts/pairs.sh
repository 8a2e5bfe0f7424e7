#!/usr/bin/env bash
# Compares two builds of delayq on one workload in interleaved pairs: build A, then
# build B, each on a freshly started empty server (on-fresh-server.sh), repeated.
# Interleaving keeps a machine whose speed drifts from favouring either build.
#
# Usage: pairs.sh <dir A> <dir B> <pairs> <workload> [delayq-bench flags...]
#   e.g. DELAYQ_REDIS_URL=redis://127.0.0.1:6379 \
#        pairs.sh /tmp/before /tmp/after 3 push --mode batch --redis-url redis://127.0.0.1:6379
# Each directory holds a `delayq` and a `delayq-bench` binary. With DELAYQ_REDIS_URL set
# (a standalone Redis), it is emptied (FLUSHALL) before every run. Prints one line per
# run with the throughput, lateness and CPU figures the workload reports, then the
# medians per build; a failed run stops the comparison with its output.
set -euo pipefail

if [ $# -lt 4 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/../../.." && pwd)"
a="$1"
b="$2"
pairs="$3"
shift 3
for dir in "$a" "$b"; do
  for binary in delayq delayq-bench; do
    [ -x "$dir/$binary" ] || { echo "no $binary in $dir" >&2; exit 2; }
  done
done
fields='^ *(jobs_per_s|push_jobs_per_s|finish_jobs_per_s|unfinished_at_push_end|unreceived_at_push_end|in_hand_at_push_end|finish_after_push_ms|lateness_ms_p50|lateness_ms_p99|lateness_ms_max|group_p99_max_ms|early|missing|duplicates|drain_ms|server_cpu_us_per_job|redis_cpu_us_per_job|client_cpu_us_per_job) '
results="$(mktemp -t delayq-pairs.XXXXXX)"
trap 'rm -f "$results"' EXIT

for pair in $(seq 1 "$pairs"); do
  for dir in "$a" "$b"; do
    if [ -n "${DELAYQ_REDIS_URL:-}" ]; then
      redis-cli -u "${DELAYQ_REDIS_URL%%,*}" flushall >/dev/null
    fi
    if ! output="$(DELAYQ_BIN="$dir/delayq" BENCH_BIN="$dir/delayq-bench" \
      "$root/crates/delayq-bench/scripts/on-fresh-server.sh" "$@" 2>&1)"; then
      echo "pair $pair $dir: the run failed:" >&2
      echo "$output" >&2
      exit 1
    fi
    line="$(echo "$output" | grep -E "$fields" | awk '{printf "%s=%s ", $1, $2}')"
    echo "pair $pair $dir: $line"
    echo "$dir $line" >>"$results"
  done
done

echo "medians:"
for dir in "$a" "$b"; do
  grep "^$dir " "$results" | cut -d' ' -f2- | tr ' ' '\n' | grep = | awk -F= -v dir="$dir" '
    { values[$1] = values[$1] " " $2; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END {
      printf "  %s:", dir
      for (i = 1; i <= n; i++) {
        k = split(substr(values[order[i]], 2), v, " ")
        for (x = 1; x <= k; x++) for (y = x + 1; y <= k; y++) if (v[y] + 0 < v[x] + 0) { t = v[x]; v[x] = v[y]; v[y] = t }
        median = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
        printf " %s=%s", order[i], median
      }
      printf "\n"
    }'
done
