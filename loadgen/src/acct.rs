//! Receiver accounting shared by the socket receiver (recv.rs) and the
//! capture receiver (capture.rs): per-flow sequence tracking, END handling,
//! latency histogram, per-size counts, stop conditions and the JSON report.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde_json::{Map, Value, json};

use crate::hist::Histogram;
use crate::proto::{self, END_SEQ};
use crate::sys::{self, Clock};
use crate::tracker::FlowTracker;

/// Flow identity as seen by the receiver: source address + source port +
/// local (destination) port.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub addr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
}

/// Small fast hasher for FlowKey (FxHash-style); keys are not attacker-chosen
/// in a benchmark.
#[derive(Default)]
struct FxHasher(u64);
impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_ne_bytes(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u16(&mut self, i: u16) {
        self.0 = (self.0.rotate_left(5) ^ i as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

struct FlowState {
    t: FlowTracker,
    expected: Option<u64>,
}

impl FlowState {
    fn new() -> FlowState {
        FlowState {
            t: FlowTracker::new(),
            expected: None,
        }
    }
}

/// When to stop, shared by both receivers.
pub struct Limits {
    pub t0: u64,
    pub idle_ns: u64,
    pub max_ns: Option<u64>,
}

impl Limits {
    pub fn new(timeout_idle_s: f64, max_seconds: f64) -> Limits {
        Limits {
            t0: sys::mono_ns(),
            idle_ns: (timeout_idle_s * 1e9) as u64,
            max_ns: if max_seconds > 0.0 { Some((max_seconds * 1e9) as u64) } else { None },
        }
    }
}

pub struct Acct {
    clock: Clock,
    drain_ns: u64,
    flows: FxMap<FlowKey, FlowState>,
    hist: Histogram,
    lat_negative: u64,
    pub kts_used: u64,
    size_counts: Vec<u64>,
    received: u64,
    bytes_payload: u64,
    pub malformed: u64,
    pub truncated: u64,
    end_received: bool,
    end_packets: u64,
    // per sender session: (total_sent, flows). Several senders may feed one
    // receiver; expected = sum over sessions.
    end_sessions: BTreeMap<u64, (u64, u32)>,
    end_clock_mismatch: bool,
    end_flow_indexes: BTreeMap<(u64, u32), ()>,
    first_pkt: Option<(u64, u64)>, // (mono, clock)
    last_pkt: (u64, u64),
    pub last_activity_mono: u64,
    end_deadline: Option<u64>,
}

impl Acct {
    pub fn new(clock: Clock, drain_ns: u64) -> Acct {
        Acct {
            clock,
            drain_ns,
            flows: FxMap::default(),
            hist: Histogram::new(),
            lat_negative: 0,
            kts_used: 0,
            size_counts: vec![0u64; 65536 + 64],
            received: 0,
            bytes_payload: 0,
            malformed: 0,
            truncated: 0,
            end_received: false,
            end_packets: 0,
            end_sessions: BTreeMap::new(),
            end_clock_mismatch: false,
            end_flow_indexes: BTreeMap::new(),
            first_pkt: None,
            last_pkt: (0, 0),
            last_activity_mono: 0,
            end_deadline: None,
        }
    }

    pub fn started(&self) -> bool {
        self.first_pkt.is_some()
    }

    /// One datagram: `payload` is the UDP payload, `size_l3` its IP total
    /// length, `rx_c` its arrival time on the chosen clock.
    #[inline]
    pub fn packet(&mut self, key: FlowKey, payload: &[u8], size_l3: u64, rx_c: u64, now_m: u64, now_c: u64) {
        let Some((seq, ts)) = proto::decode_header(payload) else {
            self.malformed += 1;
            return;
        };
        if seq == END_SEQ {
            match proto::decode_end(payload) {
                Some(e) => {
                    self.end_received = true;
                    self.end_packets += 1;
                    self.end_deadline = Some(now_m + self.drain_ns);
                    self.end_sessions.insert(e.session, (e.total_sent, e.flows));
                    if e.clock != self.clock.code() {
                        self.end_clock_mismatch = true;
                    }
                    self.end_flow_indexes.insert((e.session, e.flow_index), ());
                    self.flows.entry(key).or_insert_with(FlowState::new).expected = Some(e.flow_sent);
                }
                None => self.malformed += 1,
            }
            return;
        }
        // data packet; after an END, late data extends the drain
        if self.end_deadline.is_some() {
            self.end_deadline = Some(now_m + self.drain_ns);
        }
        self.received += 1;
        self.bytes_payload += payload.len() as u64;
        let si = (size_l3 as usize).min(self.size_counts.len() - 1);
        self.size_counts[si] += 1;
        if ts <= rx_c {
            self.hist.record(rx_c - ts);
        } else {
            self.lat_negative += 1;
        }
        if self.first_pkt.is_none() {
            self.first_pkt = Some((now_m, now_c));
        }
        self.last_pkt = (now_m, now_c);
        self.flows.entry(key).or_insert_with(FlowState::new).t.record(seq);
    }

    /// Why to stop now, if at all.
    pub fn stop_reason(&self, now: u64, lim: &Limits) -> Option<&'static str> {
        if let Some(d) = self.end_deadline
            && now >= d
        {
            return Some("end");
        }
        if let Some(m) = lim.max_ns
            && now - lim.t0 >= m
        {
            return Some("max_seconds");
        }
        if lim.idle_ns > 0 && self.first_pkt.is_some() && now - self.last_activity_mono >= lim.idle_ns {
            return Some("idle");
        }
        None
    }

    /// Nanoseconds a blocking wait may last before a deadline (<= 50 ms).
    pub fn wait_budget_ns(&self, now: u64, lim: &Limits) -> u64 {
        let mut wait_ns: u64 = 50_000_000;
        if let Some(d) = self.end_deadline {
            wait_ns = wait_ns.min(d.saturating_sub(now));
        }
        if let Some(m) = lim.max_ns {
            wait_ns = wait_ns.min((lim.t0 + m).saturating_sub(now));
        }
        wait_ns
    }

    /// The JSON result; `io` holds the receiver-specific fields
    /// (bind, socket_drops, capture details, ...), merged in last.
    pub fn report(&self, lim: &Limits, start_clock_ns: u64, stop_reason: &str, per_flow: bool, v6: bool, io: Map<String, Value>) -> Value {
        let t_stop = sys::mono_ns();
        let (mut unique, mut dups, mut reordered, mut beyond, mut data_flows) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for st in self.flows.values() {
            unique += st.t.unique;
            dups += st.t.duplicates;
            reordered += st.t.reordered;
            beyond += st.t.beyond_window;
            if st.t.received > 0 {
                data_flows += 1;
            }
        }
        let expected: Option<u64> = if self.end_sessions.is_empty() {
            None
        } else {
            Some(self.end_sessions.values().map(|v| v.0).sum())
        };
        let end_flows: Option<u64> = if self.end_sessions.is_empty() {
            None
        } else {
            Some(self.end_sessions.values().map(|v| v.1 as u64).sum())
        };
        let lost: Option<i64> = expected.map(|e| e as i64 - unique as i64);
        let loss_ratio: Option<f64> = match (expected, lost) {
            (Some(e), Some(l)) if e > 0 => Some(l as f64 / e as f64),
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        };
        let mut per_size = Map::new();
        let mut bytes_l3 = 0u64;
        for (s, &c) in self.size_counts.iter().enumerate() {
            if c > 0 {
                per_size.insert(s.to_string(), json!(c));
                bytes_l3 += s as u64 * c;
            }
        }
        let hist = &self.hist;
        let us = |v: Option<f64>| v.map(|x| x / 1000.0);
        let latency = json!({
            "count": hist.count,
            "min": if hist.count > 0 { Some(hist.min as f64 / 1000.0) } else { None },
            "mean": us(hist.mean()),
            "std": us(hist.std()),
            "p50": us(hist.percentile(50.0)),
            "p90": us(hist.percentile(90.0)),
            "p99": us(hist.percentile(99.0)),
            "p99_9": us(hist.percentile(99.9)),
            "max": if hist.count > 0 { Some(hist.max as f64 / 1000.0) } else { None },
        });
        let received = self.received;
        let last_pkt = self.last_pkt;
        let (first_m, first_c) = self.first_pkt.map(|(m, c)| (Some(m), Some(c))).unwrap_or((None, None));
        let rx_dur = first_m.map(|f| (last_pkt.0 - f) as f64 / 1e9);
        let rx_pps = rx_dur.filter(|&d| d > 0.0).map(|d| received.saturating_sub(1) as f64 / d);
        let rx_bps = rx_dur
            .filter(|&d| d > 0.0)
            .map(|d| bytes_l3 as f64 * 8.0 * (received.saturating_sub(1) as f64 / received.max(1) as f64) / d);
        let t0 = lim.t0;
        let mut out = json!({
            "tool": "tunbench-loadgen",
            "role": "recv",
            "schema_version": 1,
            "family": if v6 { "ipv6" } else { "ipv4" },
            "clock": self.clock.name(),
            "received_packets": received,
            "received_bytes_l3": bytes_l3,
            "received_bytes_udp_payload": self.bytes_payload,
            "received_bytes_l2": bytes_l3 + 18 * received,
            "unique_packets": unique,
            "duplicates": dups,
            "reordered": reordered,
            "reorder_beyond_window": beyond,
            "expected_packets": expected,
            "lost": lost,
            "loss_ratio": loss_ratio,
            "per_size_received": per_size,
            "latency_us": latency,
            "latency_negative": self.lat_negative,
            "latency_source": if self.kts_used * 2 >= hist.count && hist.count > 0 { "kernel_rx_timestamp" } else { "user_rx_time" },
            "flows_seen": data_flows,
            "end_received": self.end_received,
            "end_packets": self.end_packets,
            "end_flows_declared": end_flows,
            "end_flows_reported": self.end_flow_indexes.len(),
            "end_sessions": self.end_sessions.keys().map(|s| format!("{s:016x}")).collect::<Vec<_>>(),
            "end_clock_mismatch": self.end_clock_mismatch,
            "first_packet_ns": first_c,
            "last_packet_ns": if self.first_pkt.is_some() { Some(last_pkt.1) } else { None },
            "first_packet_s": first_m.map(|f| (f - t0) as f64 / 1e9),
            "last_packet_s": first_m.map(|_| (last_pkt.0 - t0) as f64 / 1e9),
            "rx_duration_s": rx_dur,
            "rx_pps": rx_pps,
            "rx_bps_l3": rx_bps,
            "malformed": self.malformed,
            "truncated": self.truncated,
            "start_ns": start_clock_ns,
            "elapsed_s": (t_stop - t0) as f64 / 1e9,
            "cpu_user_s": sys::cpu_times().0,
            "cpu_sys_s": sys::cpu_times().1,
            "stop_reason": stop_reason,
            "stop_signal": sys::stop_signal_name(),
        });
        for (k, v) in io {
            out[k] = v;
        }
        if per_flow {
            let mut keys: Vec<&FlowKey> = self.flows.keys().collect();
            keys.sort();
            let pf: Vec<Value> = keys
                .into_iter()
                .map(|key| {
                    let st = &self.flows[key];
                    json!({
                        "src": sys::peer_to_string(&key.addr, key.sport, v6),
                        "dst_port": key.dport,
                        "received": st.t.received,
                        "unique": st.t.unique,
                        "duplicates": st.t.duplicates,
                        "reordered": st.t.reordered,
                        "highest_seq": st.t.highest(),
                        "expected": st.expected,
                        "lost": st.expected.map(|e| e as i64 - st.t.unique as i64),
                    })
                })
                .collect();
            out["per_flow"] = Value::Array(pf);
        }
        out
    }
}

/// Offset (ns) that maps a CLOCK_REALTIME kernel timestamp onto `clock`,
/// measured now: rx_c = real - offset.
pub fn real_minus(clock: Clock, now_c: u64) -> i128 {
    let now_real = if clock == Clock::Realtime { now_c } else { sys::now_ns(Clock::Realtime) };
    now_real as i128 - now_c as i128
}

/// A kernel realtime timestamp mapped onto the chosen clock, if plausible.
#[inline]
pub fn kernel_ts(real_ns: i128, real_minus_c: i128, now_c: u64) -> Option<u64> {
    let v = real_ns - real_minus_c;
    if v > 0 && (v as u64) <= now_c { Some(v as u64) } else { None }
}
