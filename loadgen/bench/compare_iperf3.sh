#!/bin/sh
# Side-by-side unpaced 64-byte (IP total length) UDP over 127.0.0.1:
# iperf3 -u -l 36 -b 0 vs tunbench-loadgen (plain and --gso), alternating,
# ROUNDS rounds of DUR seconds each. Loopback only.
# usage: bench/compare_iperf3.sh [ROUNDS] [DUR]   (run from loadgen/)
set -eu
ROUNDS=${1:-3}
DUR=${2:-3}
B=${B:-target/release/tunbench-loadgen}
PORT=${PORT:-40300}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for r in $(seq "$ROUNDS"); do
  iperf3 -s -1 -p "$PORT" -B 127.0.0.1 >/dev/null 2>&1 &
  IP=$!
  sleep 0.5
  iperf3 -c 127.0.0.1 -p "$PORT" -u -l 36 -b 0 -t "$DUR" -J >"$TMP/ip.json"
  wait "$IP" || true
  python3 - "$TMP/ip.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["end"]["sum"]
pps = s["packets"] / s["seconds"]
cpu = d["end"]["cpu_utilization_percent"]["host_total"] / 100.0
print("iperf3          sent_pps %9.0f  recv_lost %5.1f%%  sender_cpu %.2f  pps_per_cpu_s %9.0f"
      % (pps, s.get("lost_percent", 0), cpu, pps / cpu if cpu else 0))
PY
  for opt in "" "--gso"; do
    "$B" recv --bind 127.0.0.1 --port "$PORT" >"$TMP/r.json" 2>/dev/null &
    RP=$!
    sleep 0.3
    "$B" send --dst 127.0.0.1 --port "$PORT" --size 64 --duration "$DUR" $opt >"$TMP/s.json"
    wait "$RP"
    python3 - "$TMP/s.json" "$TMP/r.json" "$opt" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
cpu = (s["cpu_user_s"] + s["cpu_sys_s"]) / s["duration_s"]
print("loadgen %-7s sent_pps %9.0f  recv_lost %5.1f%%  sender_cpu %.2f  pps_per_cpu_s %9.0f"
      % (sys.argv[3], s["achieved_pps"], 100.0 * (r["loss_ratio"] or 0), cpu, s["achieved_pps"] / cpu if cpu else 0))
PY
  done
done
