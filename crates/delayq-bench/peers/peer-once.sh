#!/usr/bin/env bash
# The peer's runs of W3 and W4 for session.sh's PEER_ONCE_CMD: BullMQ's memory per pending
# job (the peer drivers' bullmq/memory.js) and W4's drain (bullmq-burst.js, beside this
# script), printing
#   bullmq memory: bytes_per_job=N
#   bullmq burst: drain_ms=N first_pop_ms=N finish_drain_ms=N missing=N duplicates=N early=N
# Usage: PEERS=/path/to/peers peer-once.sh   (PEERS: a copy of the peer drivers on which
# setup.sh ran; it has bullmq in node_modules). REDIS_URL as for session.sh; it is FLUSHALLed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${PEERS:?set PEERS to the folder of the peer drivers}"
url="${REDIS_URL:-redis://127.0.0.1:6379}"
hostport="${url#redis://}"; hostport="${hostport%%/*}"
host="${hostport%%:*}"; port="${hostport##*:}"
fields() { # fields KEY...: the KEYs of the last JSON line on stdin, as key=value
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s.trim().split("\n").pop());console.log(process.argv.slice(1).map(k=>k+"="+j[k]).join(" "))})' "$@"
}
(cd "$PEERS" && node bullmq/memory.js --host "$host" --port "$port" --n 200000) \
  | fields bytes_per_job | sed 's/^/bullmq memory: /'
# A lead of 40 s: addBulk must end before the instant even on a slow machine.
NODE_PATH="$PEERS/node_modules" node "$here/bullmq-burst.js" --host "$host" --port "$port" --n 200000 --lead-ms 40000 \
  | fields drain_ms first_pop_ms finish_drain_ms missing duplicates early valid | sed 's/^/bullmq burst: /'
