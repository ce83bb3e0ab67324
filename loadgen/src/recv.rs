//! Receiver: K sockets, recvmmsg batches, per-flow accounting, END handling.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use serde_json::{Value, json};

use crate::CliError;
use crate::hist::Histogram;
use crate::proto::{self, END_SEQ};
use crate::send::l3_overhead;
use crate::sys::{self, Clock};
use crate::tracker::FlowTracker;

pub struct RecvCfg {
    pub bind: IpAddr,
    pub port: u16,
    pub ports_count: u16,
    pub timeout_idle_s: f64,
    pub max_seconds: f64,
    pub drain_ms: u64,
    pub batch: usize,
    pub clock: Clock,
    pub rcvbuf: i32,
    pub per_flow: bool,
    pub busy_poll_us: u64,
    pub idle_sleep_us: u64,
}

/// Flow identity as seen by the receiver: source address + source port +
/// local (destination) port.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct FlowKey {
    addr: [u8; 16],
    sport: u16,
    dport: u16,
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

const SLOT: usize = 65536;
const CMSG_SPACE: usize = 64;

pub fn run(cfg: &RecvCfg) -> Result<Value, CliError> {
    let v6 = cfg.bind.is_ipv6();
    let ovh = l3_overhead(v6) as u64;
    let k = cfg.ports_count.max(1);
    if cfg.port as u32 + k as u32 - 1 > 65535 {
        return Err(CliError::new(
            "--port + --ports-count exceeds 65535",
            "lower --port or --ports-count",
        ));
    }
    let mut socks = Vec::with_capacity(k as usize);
    let mut rcvbuf_actual = 0;
    let mut ovfl_ok = true;
    let mut kts_ok = true;
    for i in 0..k {
        let addr = SocketAddr::new(cfg.bind, cfg.port + i);
        let s = UdpSocket::bind(addr).map_err(|e| {
            CliError::new(
                format!("cannot bind {addr}: {e}"),
                "check that the address exists in this namespace and the port is free",
            )
        })?;
        let fd = s.as_raw_fd();
        sys::set_nonblocking(fd);
        rcvbuf_actual = sys::set_buf(fd, true, cfg.rcvbuf);
        ovfl_ok &= sys::enable_rxq_ovfl(fd);
        kts_ok &= sys::enable_rx_timestamps(fd);
        socks.push(s);
    }
    eprintln!("ready");

    let batch = cfg.batch.clamp(1, 1024);
    let mut bufs: Vec<u8> = vec![0u8; SLOT * batch];
    let mut cbufs: Vec<u64> = vec![0u64; CMSG_SPACE / 8 * batch];
    let mut names: Vec<libc::sockaddr_storage> = (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
    let mut iovs: Vec<libc::iovec> = (0..batch)
        .map(|i| libc::iovec {
            iov_base: unsafe { bufs.as_mut_ptr().add(i * SLOT) } as *mut libc::c_void,
            iov_len: SLOT,
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
    let mut pfds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();

    let mut flows: FxMap<FlowKey, FlowState> = FxMap::default();
    let mut hist = Histogram::new();
    let mut lat_negative = 0u64;
    let mut kts_used = 0u64;
    let mut size_counts = vec![0u64; 65536 + 64];
    let mut received = 0u64;
    let mut bytes_payload = 0u64;
    let mut malformed = 0u64;
    let mut truncated = 0u64;
    let mut drops_per_sock = vec![0u64; socks.len()];
    let mut end_received = false;
    let mut end_packets = 0u64;
    // per sender session: (total_sent, flows). Several senders may feed one
    // receiver; expected = sum over sessions.
    let mut end_sessions: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
    let mut end_clock_mismatch = false;
    let mut end_flow_indexes: BTreeMap<(u64, u32), ()> = BTreeMap::new();
    let mut first_pkt: Option<(u64, u64)> = None; // (mono, clock)
    let mut last_pkt: (u64, u64) = (0, 0);
    let mut last_activity_mono = 0u64;
    let mut end_deadline: Option<u64> = None;

    let t0 = sys::mono_ns();
    let start_clock_ns = sys::now_ns(cfg.clock);
    let idle_ns = (cfg.timeout_idle_s * 1e9) as u64;
    let max_ns = if cfg.max_seconds > 0.0 {
        Some((cfg.max_seconds * 1e9) as u64)
    } else {
        None
    };
    let drain_ns = cfg.drain_ms * 1_000_000;
    let spin_ns = cfg.busy_poll_us * 1000;
    let sleep_ns = if kts_ok { cfg.idle_sleep_us * 1000 } else { 0 };

    let stop_reason: &str;
    loop {
        if sys::stop_requested() {
            stop_reason = "signal";
            break;
        }
        let mut got_any = false;
        for (si, s) in socks.iter().enumerate() {
            let fd = s.as_raw_fd();
            loop {
                for i in 0..batch {
                    let h = &mut msgs[i].msg_hdr;
                    h.msg_name = &mut names[i] as *mut _ as *mut libc::c_void;
                    h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
                    h.msg_iov = &mut iovs[i];
                    h.msg_iovlen = 1;
                    h.msg_control = unsafe { cbufs.as_mut_ptr().add(i * CMSG_SPACE / 8) } as *mut libc::c_void;
                    h.msg_controllen = CMSG_SPACE;
                    h.msg_flags = 0;
                }
                // SAFETY: all pointers reference live buffers sized as declared.
                let r = unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), batch as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
                if r <= 0 {
                    break;
                }
                got_any = true;
                let now_m = sys::mono_ns();
                let now_c = if cfg.clock == Clock::Monotonic {
                    now_m
                } else {
                    sys::now_ns(cfg.clock)
                };
                // kernel RX timestamps are CLOCK_REALTIME: offset to map them
                // onto the chosen clock (0 for realtime)
                let now_real = if cfg.clock == Clock::Realtime {
                    now_c
                } else {
                    sys::now_ns(Clock::Realtime)
                };
                let real_minus_c = now_real as i128 - now_c as i128;
                last_activity_mono = now_m;
                let dport = cfg.port + si as u16;
                for i in 0..r as usize {
                    let len = msgs[i].msg_len as usize;
                    let h = &msgs[i].msg_hdr;
                    // cumulative socket drop counter (SO_RXQ_OVFL) and
                    // kernel arrival timestamp (SCM_TIMESTAMPNS)
                    let mut rx_c = now_c;
                    if h.msg_controllen > 0 {
                        // SAFETY: control buffer filled by the kernel.
                        unsafe {
                            let mut c = libc::CMSG_FIRSTHDR(h);
                            while !c.is_null() {
                                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_RXQ_OVFL {
                                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const u32) as u64;
                                    if v > drops_per_sock[si] {
                                        drops_per_sock[si] = v;
                                    }
                                } else if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                                    let real = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
                                    let v = real - real_minus_c;
                                    if v > 0 && (v as u64) <= now_c {
                                        rx_c = v as u64;
                                        kts_used += 1;
                                    }
                                }
                                c = libc::CMSG_NXTHDR(h, c);
                            }
                        }
                    }
                    if h.msg_flags & libc::MSG_TRUNC != 0 {
                        truncated += 1;
                        continue;
                    }
                    let p = &bufs[i * SLOT..i * SLOT + len];
                    let Some((seq, ts)) = proto::decode_header(p) else {
                        malformed += 1;
                        continue;
                    };
                    let Some((addr, sport)) = sys::peer_from_sockaddr(&names[i]) else {
                        malformed += 1;
                        continue;
                    };
                    let key = FlowKey { addr, sport, dport };
                    if seq == END_SEQ {
                        match proto::decode_end(p) {
                            Some(e) => {
                                end_received = true;
                                end_packets += 1;
                                end_deadline = Some(now_m + drain_ns);
                                end_sessions.insert(e.session, (e.total_sent, e.flows));
                                if e.clock != cfg.clock.code() {
                                    end_clock_mismatch = true;
                                }
                                end_flow_indexes.insert((e.session, e.flow_index), ());
                                let st = flows.entry(key).or_insert_with(|| FlowState {
                                    t: FlowTracker::new(),
                                    expected: None,
                                });
                                st.expected = Some(e.flow_sent);
                            }
                            None => malformed += 1,
                        }
                        continue;
                    }
                    // data packet; after an END, late data extends the drain
                    if end_deadline.is_some() {
                        end_deadline = Some(now_m + drain_ns);
                    }
                    received += 1;
                    // a dual-stack (::) socket sees IPv4 senders as ::ffff:a.b.c.d
                    let v4mapped = v6 && key.addr[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
                    let size = len as u64 + if v4mapped { 28 } else { ovh };
                    bytes_payload += len as u64;
                    let si_ = (size as usize).min(size_counts.len() - 1);
                    size_counts[si_] += 1;
                    if ts <= rx_c {
                        hist.record(rx_c - ts);
                    } else {
                        lat_negative += 1;
                    }
                    if first_pkt.is_none() {
                        first_pkt = Some((now_m, now_c));
                    }
                    last_pkt = (now_m, now_c);
                    flows
                        .entry(key)
                        .or_insert_with(|| FlowState {
                            t: FlowTracker::new(),
                            expected: None,
                        })
                        .t
                        .record(seq);
                }
                if (r as usize) < batch {
                    break;
                }
            }
        }
        let now = sys::mono_ns();
        if let Some(d) = end_deadline
            && now >= d
        {
            stop_reason = "end";
            break;
        }
        if let Some(m) = max_ns
            && now - t0 >= m
        {
            stop_reason = "max_seconds";
            break;
        }
        if idle_ns > 0 && first_pkt.is_some() && now - last_activity_mono >= idle_ns {
            stop_reason = "idle";
            break;
        }
        // Busy-poll while traffic is flowing: a receiver sleeping in poll()
        // must be woken per packet batch, and on loopback/veth that wake-up
        // cost lands on the *sender's* CPU and throttles it. After `spin_ns`
        // without data we fall back to a blocking poll().
        let since = now.saturating_sub(last_activity_mono);
        if !got_any && since >= spin_ns && first_pkt.is_some() && since < 1_000_000_000 && sleep_ns > 0 {
            // traffic is flowing but the queue is empty: nap instead of
            // poll(), so the sender never pays for waking us up; latency is
            // unaffected because it uses kernel arrival timestamps
            sys::sleep_ns(sleep_ns);
        } else if !got_any && since >= spin_ns {
            // wait for data, but wake up for deadlines and signals (<= 50 ms)
            let mut wait_ns: u64 = 50_000_000;
            if let Some(d) = end_deadline {
                wait_ns = wait_ns.min(d.saturating_sub(now));
            }
            if let Some(m) = max_ns {
                wait_ns = wait_ns.min((t0 + m).saturating_sub(now));
            }
            let ms = wait_ns.div_ceil(1_000_000) as i32;
            // SAFETY: pfds is a live array of pollfd.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        }
    }
    let t_stop = sys::mono_ns();

    // --- aggregate ---------------------------------------------------------
    let mut unique = 0u64;
    let mut dups = 0u64;
    let mut reordered = 0u64;
    let mut beyond = 0u64;
    let mut data_flows = 0u64;
    for st in flows.values() {
        unique += st.t.unique;
        dups += st.t.duplicates;
        reordered += st.t.reordered;
        beyond += st.t.beyond_window;
        if st.t.received > 0 {
            data_flows += 1;
        }
    }
    let expected: Option<u64> = if end_sessions.is_empty() {
        None
    } else {
        Some(end_sessions.values().map(|v| v.0).sum())
    };
    let end_flows: Option<u64> = if end_sessions.is_empty() {
        None
    } else {
        Some(end_sessions.values().map(|v| v.1 as u64).sum())
    };
    let lost: Option<i64> = expected.map(|e| e as i64 - unique as i64);
    let loss_ratio: Option<f64> = match (expected, lost) {
        (Some(e), Some(l)) if e > 0 => Some(l as f64 / e as f64),
        (Some(_), Some(_)) => Some(0.0),
        _ => None,
    };
    let mut per_size = serde_json::Map::new();
    let mut bytes_l3 = 0u64;
    for (s, &c) in size_counts.iter().enumerate() {
        if c > 0 {
            per_size.insert(s.to_string(), json!(c));
            bytes_l3 += s as u64 * c;
        }
    }
    let us = |v: Option<f64>| v.map(|x| x / 1000.0);
    let latency = json!({
        "count": hist.count,
        "min": if hist.count > 0 { Some(hist.min as f64 / 1000.0) } else { None },
        "mean": us(hist.mean()),
        "p50": us(hist.percentile(50.0)),
        "p90": us(hist.percentile(90.0)),
        "p99": us(hist.percentile(99.0)),
        "p99_9": us(hist.percentile(99.9)),
        "max": if hist.count > 0 { Some(hist.max as f64 / 1000.0) } else { None },
    });
    let (first_m, first_c) = first_pkt.map(|(m, c)| (Some(m), Some(c))).unwrap_or((None, None));
    let rx_dur = first_m.map(|f| (last_pkt.0 - f) as f64 / 1e9);
    let rx_pps = rx_dur.filter(|&d| d > 0.0).map(|d| received.saturating_sub(1) as f64 / d);
    let rx_bps = rx_dur
        .filter(|&d| d > 0.0)
        .map(|d| bytes_l3 as f64 * 8.0 * (received.saturating_sub(1) as f64 / received.max(1) as f64) / d);
    let mut out = json!({
        "tool": "tunbench-loadgen",
        "role": "recv",
        "schema_version": 1,
        "bind": cfg.bind.to_string(),
        "port": cfg.port,
        "ports_count": k,
        "family": if v6 { "ipv6" } else { "ipv4" },
        "clock": cfg.clock.name(),
        "received_packets": received,
        "received_bytes_l3": bytes_l3,
        "received_bytes_udp_payload": bytes_payload,
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
        "latency_negative": lat_negative,
        "latency_source": if kts_used * 2 >= hist.count && hist.count > 0 { "kernel_rx_timestamp" } else { "user_rx_time" },
        "flows_seen": data_flows,
        "end_received": end_received,
        "end_packets": end_packets,
        "end_flows_declared": end_flows,
        "end_flows_reported": end_flow_indexes.len(),
        "end_sessions": end_sessions.keys().map(|s| format!("{s:016x}")).collect::<Vec<_>>(),
        "end_clock_mismatch": end_clock_mismatch,
        "first_packet_ns": first_c,
        "last_packet_ns": if first_pkt.is_some() { Some(last_pkt.1) } else { None },
        "first_packet_s": first_m.map(|f| (f - t0) as f64 / 1e9),
        "last_packet_s": first_m.map(|_| (last_pkt.0 - t0) as f64 / 1e9),
        "rx_duration_s": rx_dur,
        "rx_pps": rx_pps,
        "rx_bps_l3": rx_bps,
        "malformed": malformed,
        "truncated": truncated,
        "socket_drops": if ovfl_ok { Some(drops_per_sock.iter().sum::<u64>()) } else { None },
        "rcvbuf_bytes": rcvbuf_actual,
        "start_ns": start_clock_ns,
        "elapsed_s": (t_stop - t0) as f64 / 1e9,
        "cpu_user_s": sys::cpu_times().0,
        "cpu_sys_s": sys::cpu_times().1,
        "stop_reason": stop_reason,
        "stop_signal": sys::stop_signal_name(),
    });
    if cfg.per_flow {
        let mut keys: Vec<&FlowKey> = flows.keys().collect();
        keys.sort();
        let pf: Vec<Value> = keys
            .into_iter()
            .map(|key| {
                let st = &flows[key];
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
    Ok(out)
}
