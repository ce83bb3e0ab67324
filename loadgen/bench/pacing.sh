#!/bin/sh
# Pacing accuracy over 127.0.0.1: 100 flows, 64 B and simple IMIX, several
# rates; prints sender-achieved and receiver-observed rate error vs target.
# usage: bench/pacing.sh [DUR]   (run from loadgen/)
set -eu
DUR=${1:-3}
B=${B:-target/release/tunbench-loadgen}
PORT=${PORT:-40500}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() {
  "$B" recv --bind 127.0.0.1 --port "$PORT" >"$TMP/r.json" 2>/dev/null &
  RP=$!
  sleep 0.3
  "$B" send --dst 127.0.0.1 --port "$PORT" --flows 100 --duration "$DUR" "$@" >"$TMP/s.json"
  wait "$RP"
  python3 - "$TMP/s.json" "$TMP/r.json" "$*" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
if s["rate_mode"] == "bps":
    tgt, got, rx = s["target_bps_l3"], s["achieved_bps_l3"], r["rx_bps_l3"]
else:
    tgt, got, rx = s["target_pps"], s["achieved_pps"], r["rx_pps"]
print("%-38s target %12.0f  sender %+7.3f%%  receiver %+7.3f%%  lost %s  limited %s"
      % (sys.argv[3], tgt, 100 * (got / tgt - 1), 100 * (rx / tgt - 1), r["lost"], s["sender_limited"]))
PY
}
for r in 10k 50k 100k 200k; do run --size 64 --rate-pps "$r"; done
for r in 10k 50k 100k; do run --imix simple --rate-pps "$r"; done
run --imix simple --rate-bps 100M
run --size 361 --rate-bps 200M
