//! Sender: N flows, sendmmsg batches, absolute-schedule pacing.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use serde_json::{Value, json};

use crate::CliError;
use crate::mix::{Mix, Rng, SizeSeq};
use crate::proto::{self, EndInfo, HDR_LEN};
use crate::sys::{self, Clock};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    Unpaced,
    Pps(f64),
    /// bits per second counting L3 bytes (IP total length)
    BpsL3(f64),
}

/// UDP_SEGMENT socket option / cmsg type (linux/udp.h), not exported by libc for gnu.
const UDP_SEGMENT: i32 = 103;
/// Kernel limit on segments per GSO send (UDP_MAX_SEGMENTS is 64 on older kernels).
const GSO_MAX_SEGS: u32 = 64;
/// Keep a GSO super-datagram below the 64 KiB IP limit.
const GSO_MAX_BYTES: usize = 65000;

pub struct SendCfg {
    /// destination addresses (at least one); flow f goes to dsts[f mod len]
    pub dsts: Vec<IpAddr>,
    pub port: u16,
    pub ports_count: u16,
    /// source addresses to bind (empty = any); flow f leaves from srcs[f mod len]
    pub srcs: Vec<IpAddr>,
    pub src_port: Option<u16>,
    /// lockstep source ports: flow f uses source port index f mod N (see `layout`)
    pub src_ports: Option<u32>,
    pub flows: u32,
    pub mix: Mix,
    pub rate: Rate,
    pub duration_s: f64,
    pub batch: usize,
    pub seed: u64,
    pub clock: Clock,
    pub sndbuf: i32,
    pub end_rounds: u32,
    pub end_gap_ms: u64,
    pub gso: bool,
    /// sender threads; flows (sockets) are dealt out round-robin
    pub threads: usize,
    /// CPUs to pin thread i to (cpus[i % len]); empty = no pinning
    pub cpus: Vec<usize>,
}

/// Where one flow goes: its socket (by source address and port index), destination address
/// index and destination port offset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slot {
    pub sock: usize,
    pub src: usize,
    pub src_port: u32,
    pub dst: usize,
    pub dport: u32,
}

/// The flows' 4-tuples. Classic (one source and one destination address, no `src_ports`):
/// flow f uses destination port P + f mod K and socket f div K (socket i = source port i), as
/// before. Lockstep (several addresses or `src_ports`, the way the SD-WAN study's tester
/// numbers its flows): every field steps with the flow number, flow f uses source address
/// f mod S, source port f mod SP (SP = `src_ports`, else one per flow), destination address
/// f mod D and destination port f mod K; one socket per distinct (source address, source port).
/// The receiver tells flows apart by (source address, source port, destination port): two flows
/// that differ only in their destination address are refused.
pub fn layout(n: u32, k: u32, nsrc: usize, ndst: usize, src_ports: Option<u32>) -> Result<Vec<Slot>, CliError> {
    let k = k.max(1);
    if nsrc <= 1 && ndst <= 1 && src_ports.is_none() {
        return Ok((0..n)
            .map(|f| Slot { sock: (f / k) as usize, src: 0, src_port: f / k, dst: 0, dport: f % k })
            .collect());
    }
    let sp = src_ports.unwrap_or(n).max(1);
    let (nsrc, ndst) = (nsrc.max(1), ndst.max(1));
    let mut socks: std::collections::HashMap<(usize, u32), usize> = std::collections::HashMap::new();
    let mut seen: std::collections::HashMap<(usize, u32, u32), u32> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(n as usize);
    for f in 0..n {
        let (src, port, dst, dport) = ((f as usize) % nsrc, f % sp, (f as usize) % ndst, f % k);
        if let Some(g) = seen.insert((src, port, dport), f) {
            return Err(CliError::new(
                format!("flows {g} and {f} differ only in their destination address, which the receiver does not tell apart"),
                "give at least as many source ports (--src-ports) or destination ports (--ports-count) as destination addresses",
            ));
        }
        let next = socks.len();
        let sock = *socks.entry((src, port)).or_insert(next);
        out.push(Slot { sock, src, src_port: port, dst, dport });
    }
    Ok(out)
}

/// Per-packet L3 overhead of IP + UDP headers for the family.
pub fn l3_overhead(v6: bool) -> u32 {
    if v6 { 48 } else { 28 }
}

struct Flow {
    index: u32, // global flow number (END packets carry it)
    sock: usize, // index into its worker's sockets
    dst: SocketAddr,
    dst_ss: libc::sockaddr_storage,
    dst_len: libc::socklen_t,
    next_seq: u32,
    sent: u64,
}

struct Sock {
    sock: UdpSocket,
    flows: Vec<usize>,
    rr: usize,
    connected: bool,
}

pub fn validate_sizes(mix: &Mix, v6: bool) -> Result<(), CliError> {
    let ovh = l3_overhead(v6);
    let min = ovh + HDR_LEN as u32;
    if mix.min_size() < min {
        return Err(CliError::new(
            format!(
                "packet size {} is below the minimum of {} bytes for {} (IP+UDP headers {} + {}-byte loadgen header)",
                mix.min_size(),
                min,
                if v6 { "IPv6" } else { "IPv4" },
                ovh,
                HDR_LEN
            ),
            format!("use sizes >= {min}"),
        ));
    }
    let max = if v6 { 65535 + 40 } else { 65535 };
    if mix.max_size() > max {
        return Err(CliError::new(
            format!("packet size {} exceeds the maximum of {max}", mix.max_size()),
            "use smaller sizes",
        ));
    }
    Ok(())
}

pub fn run(cfg: &SendCfg) -> Result<Value, CliError> {
    let v6 = cfg.dsts[0].is_ipv6();
    validate_sizes(&cfg.mix, v6)?;
    if cfg.srcs.iter().chain(cfg.dsts.iter()).any(|a| a.is_ipv6() != v6) {
        return Err(CliError::new(
            "--src and --dst addresses are of different address families",
            "use IPv4 addresses only or IPv6 addresses only",
        ));
    }
    if cfg.port as u32 + cfg.ports_count as u32 - 1 > 65535 {
        return Err(CliError::new(
            "--port + --ports-count exceeds 65535",
            "lower --port or --ports-count",
        ));
    }
    let ovh = l3_overhead(v6);
    let k = cfg.ports_count.max(1) as u32;
    let n = cfg.flows.max(1);
    let slots = layout(n, k, cfg.srcs.len(), cfg.dsts.len(), cfg.src_ports)?;
    let nsock = slots.iter().map(|s| s.sock).max().unwrap_or(0) + 1;
    let top_port = slots.iter().map(|s| s.src_port).max().unwrap_or(0);
    if let Some(base) = cfg.src_port
        && base as u64 + top_port as u64 > 65535
    {
        return Err(CliError::new(
            "--src-port range exceeds 65535",
            "lower --src-port or use fewer flows / more --ports-count",
        ));
    }

    // --- sockets and flows -------------------------------------------------
    let any_ip = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    // flows by socket, in flow order; thread t owns sockets t, t+T, ...
    let mut by_sock: Vec<Vec<u32>> = vec![Vec::new(); nsock];
    for (f, sl) in slots.iter().enumerate() {
        by_sock[sl.sock].push(f as u32);
    }
    let nthreads = cfg.threads.clamp(1, nsock.min(64));
    let mut parts: Vec<(Vec<Sock>, Vec<Flow>)> = (0..nthreads).map(|_| (Vec::new(), Vec::new())).collect();
    for (s, sock_flows) in by_sock.iter().enumerate() {
        let first = slots[sock_flows[0] as usize];
        let port = cfg.src_port.map(|b| b + first.src_port as u16).unwrap_or(0);
        let addr = SocketAddr::new(cfg.srcs.get(first.src).copied().unwrap_or(any_ip), port);
        let sock = UdpSocket::bind(addr).map_err(|e| {
            CliError::new(
                format!("cannot bind sender socket to {addr}: {e}"),
                "check --src / --src-port, or omit --src-port to let the kernel choose",
            )
        })?;
        sys::set_buf(sock.as_raw_fd(), false, cfg.sndbuf);
        let (socks, flows) = &mut parts[s % nthreads];
        let mut sk = Sock {
            sock,
            flows: Vec::new(),
            rr: 0,
            connected: false,
        };
        for &f in sock_flows {
            let sl = slots[f as usize];
            let dst = SocketAddr::new(cfg.dsts[sl.dst], cfg.port + sl.dport as u16);
            let (dst_ss, dst_len) = sys::to_sockaddr(&dst);
            sk.flows.push(flows.len());
            flows.push(Flow {
                index: f,
                sock: socks.len(),
                dst,
                dst_ss,
                dst_len,
                next_seq: 0,
                sent: 0,
            });
        }
        if sk.flows.len() == 1 {
            // a connected socket skips the per-packet route lookup
            sk.connected = sk.sock.connect(flows[sk.flows[0]].dst).is_ok();
        }
        socks.push(sk);
    }
    let mut src_ports: Vec<u16> = vec![0; nsock];
    for (t, (socks, _)) in parts.iter().enumerate() {
        for (j, sk) in socks.iter().enumerate() {
            src_ports[t + j * nthreads] = sk.sock.local_addr().map(|a| a.port()).unwrap_or(0);
        }
    }

    // --- data phase: one worker per thread, each with its share of the rate --
    let mean = cfg.mix.mean_size();
    sys::set_min_timer_slack();
    // several workers start together a little ahead, once all are spawned
    let lead_ns = if nthreads > 1 { 2_000_000 } else { 0 };
    let t0 = sys::mono_ns() + lead_ns;
    let start_clock_ns = sys::now_ns(cfg.clock) + lead_ns;
    let outs: Vec<WorkerOut> = if nthreads == 1 {
        let (socks, flows) = parts.pop().unwrap();
        vec![worker(cfg, socks, flows, 1.0, cfg.seed, t0)]
    } else {
        std::thread::scope(|sc| {
            let handles: Vec<_> = parts
                .into_iter()
                .enumerate()
                .map(|(t, (socks, flows))| {
                    let share = flows.len() as f64 / n as f64;
                    let seed = cfg.seed.wrapping_add(t as u64 * 0x9e37_79b9_7f4a_7c15);
                    let cpu = cfg.cpus.get(t % cfg.cpus.len().max(1)).copied();
                    sc.spawn(move || {
                        if let Some(c) = cpu {
                            let _ = sys::pin_cpu(c);
                        }
                        worker(cfg, socks, flows, share, seed, t0)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("sender thread panicked")).collect()
        })
    };
    let interrupted = sys::stop_requested();
    let t_stop = outs.iter().map(|o| o.t_stop).max().unwrap_or(t0);
    let end_clock_ns = sys::now_ns(cfg.clock);
    let elapsed = (t_stop.saturating_sub(t0)) as f64 / 1e9;
    let mut size_counts = vec![0u64; 65536 + 64];
    let (mut sent_packets, mut sent_bytes_l3, mut send_errors, mut batches) = (0u64, 0u64, 0u64, 0u64);
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut seq_exhausted = false;
    let mut eff_batch = 0usize;
    let mut flows: Vec<(Flow, usize)> = Vec::with_capacity(n as usize); // (flow, owner)
    let mut socks: Vec<Vec<Sock>> = Vec::with_capacity(outs.len());
    for (t, o) in outs.into_iter().enumerate() {
        for (i, c) in o.size_counts.iter().enumerate() {
            size_counts[i] += c;
        }
        sent_packets += o.sent_packets;
        sent_bytes_l3 += o.sent_bytes_l3;
        send_errors += o.send_errors;
        batches += o.batches;
        seq_exhausted |= o.seq_exhausted;
        eff_batch = eff_batch.max(o.eff_batch);
        for (k_, v) in o.errors {
            *errors.entry(k_).or_default() += v;
        }
        flows.extend(o.flows.into_iter().map(|f| (f, t)));
        socks.push(o.socks);
    }
    flows.sort_by_key(|(f, _)| f.index);

    // --- END packets -------------------------------------------------------
    let session = Rng::new(t0 ^ (std::process::id() as u64) << 32).next_u64();
    let mut end_sent = 0u64;
    let mut end_errors = 0u64;
    let mut endbuf = [0u8; proto::END_LEN];
    for round in 0..cfg.end_rounds {
        for (fl, owner) in flows.iter() {
            let info = EndInfo {
                session,
                flow_index: fl.index,
                flows: n,
                flow_sent: fl.sent,
                total_sent: sent_packets,
                clock: cfg.clock.code(),
                round: round as u8,
            };
            proto::encode_end(&mut endbuf, sys::now_ns(cfg.clock), &info);
            let fd = socks[*owner][fl.sock].sock.as_raw_fd();
            // SAFETY: valid buffer and sockaddr.
            let r = unsafe {
                libc::sendto(
                    fd,
                    endbuf.as_ptr() as *const libc::c_void,
                    endbuf.len(),
                    0,
                    &fl.dst_ss as *const _ as *const libc::sockaddr,
                    fl.dst_len,
                )
            };
            if r < 0 { end_errors += 1 } else { end_sent += 1 }
        }
        if round + 1 < cfg.end_rounds {
            // growing gaps (g, 2g, 4g, ...): a receive queue that is full at
            // the end of the data has time to drain before the next round
            std::thread::sleep(std::time::Duration::from_millis(cfg.end_gap_ms << round.min(4)));
        }
    }

    // --- report ------------------------------------------------------------
    let mut per_size: BTreeMap<u32, u64> = BTreeMap::new();
    for (sz, &c) in size_counts.iter().enumerate() {
        if c > 0 {
            per_size.insert(sz as u32, c);
        }
    }
    let achieved_pps = if elapsed > 0.0 { sent_packets as f64 / elapsed } else { 0.0 };
    let achieved_bps_l3 = if elapsed > 0.0 { sent_bytes_l3 as f64 * 8.0 / elapsed } else { 0.0 };
    let l2 = sent_bytes_l3 + 18 * sent_packets;
    let wire = sent_bytes_l3 + 38 * sent_packets;
    let (target_pps, target_bps) = match cfg.rate {
        Rate::Unpaced => (None, None),
        Rate::Pps(r) => (Some(r), Some(r * mean * 8.0)),
        Rate::BpsL3(b) => (Some(b / (8.0 * mean)), Some(b)),
    };
    let sender_limited = match cfg.rate {
        Rate::Unpaced => None,
        Rate::Pps(r) => Some(achieved_pps < 0.98 * r),
        Rate::BpsL3(b) => Some(achieved_bps_l3 < 0.98 * b),
    };
    let mix_json = json!({
        "kind": cfg.mix.kind,
        "spec": cfg.mix.spec,
        "weights": cfg.mix.weights.iter().map(|&(s, w)| json!({"size": s, "weight": w})).collect::<Vec<_>>(),
        "cycle_len": cfg.mix.cycle.len(),
        "shuffled": cfg.mix.shuffle,
        "mean_size_l3": mean,
    });
    Ok(json!({
        "tool": "tunbench-loadgen",
        "role": "send",
        "schema_version": 1,
        "dst": cfg.dsts[0].to_string(),
        "dsts": cfg.dsts.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "port": cfg.port,
        "ports_count": k,
        "src": cfg.srcs.first().map(|s| s.to_string()),
        "srcs": cfg.srcs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "src_ports_lockstep": cfg.src_ports,
        "src_ports": src_ports,
        "family": if v6 { "ipv6" } else { "ipv4" },
        "flows": n,
        "sockets": nsock,
        "mix": mix_json,
        "seed": cfg.seed,
        "clock": cfg.clock.name(),
        "rate_mode": match cfg.rate { Rate::Unpaced => "unpaced", Rate::Pps(_) => "pps", Rate::BpsL3(_) => "bps" },
        "rate_basis": "l3",
        "target_pps": target_pps,
        "target_bps_l3": target_bps,
        "batch": cfg.batch.clamp(1, 1024),
        "effective_batch": eff_batch,
        "batches": batches,
        "gso": cfg.gso,
        "duration_target_s": cfg.duration_s,
        "duration_s": elapsed,
        "start_ns": start_clock_ns,
        "end_ns": end_clock_ns,
        "sent_packets": sent_packets,
        "sent_bytes_l3": sent_bytes_l3,
        "sent_bytes_udp_payload": sent_bytes_l3 - ovh as u64 * sent_packets,
        "sent_bytes_l2": l2,
        "sent_bytes_wire": wire,
        "achieved_pps": achieved_pps,
        "achieved_bps_l3": achieved_bps_l3,
        "achieved_bps_l2": if elapsed > 0.0 { l2 as f64 * 8.0 / elapsed } else { 0.0 },
        "achieved_bps_wire": if elapsed > 0.0 { wire as f64 * 8.0 / elapsed } else { 0.0 },
        "sender_limited": sender_limited,
        "per_size_sent": per_size.iter().map(|(s, c)| (s.to_string(), json!(c))).collect::<serde_json::Map<_, _>>(),
        "per_flow_sent": flows.iter().map(|(f, _)| f.sent).collect::<Vec<_>>(),
        "threads": nthreads,
        "send_errors": send_errors,
        "send_errors_by_errno": errors,
        "end_session": format!("{session:016x}"),
        "end_packets_sent": end_sent,
        "end_send_errors": end_errors,
        "seq_exhausted": seq_exhausted,
        "cpu_user_s": sys::cpu_times().0,
        "cpu_sys_s": sys::cpu_times().1,
        "interrupted": interrupted,
        "stop_signal": sys::stop_signal_name(),
    }))
}

/// What one sender thread did (its sockets are kept for the END packets).
struct WorkerOut {
    t_stop: u64,
    socks: Vec<Sock>,
    flows: Vec<Flow>,
    size_counts: Vec<u64>,
    sent_packets: u64,
    sent_bytes_l3: u64,
    errors: BTreeMap<String, u64>,
    send_errors: u64,
    seq_exhausted: bool,
    batches: u64,
    eff_batch: usize,
}

/// The data phase of one thread: its sockets and flows, `share` of the
/// configured rate, from the common start time `t0` to t0 + duration.
fn worker(cfg: &SendCfg, mut socks: Vec<Sock>, mut flows: Vec<Flow>, share: f64, seed: u64, t0: u64) -> WorkerOut {
    let v6 = cfg.dsts[0].is_ipv6();
    let ovh = l3_overhead(v6);
    // --- buffers -----------------------------------------------------------
    let batch = cfg.batch.clamp(1, 1024);
    let slot = (cfg.mix.max_size() - ovh) as usize;
    let mut bufs: Vec<u8> = vec![0u8; slot * batch];
    let mut iovs: Vec<libc::iovec> = (0..batch)
        .map(|_| libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        })
        .collect();
    // SAFETY: mmsghdr is plain data; zeroed is a valid initial state.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
    let mut cmsgs: Vec<[u64; 4]> = vec![[0u64; 4]; batch];
    let mut msg_flow: Vec<usize> = vec![0; batch];
    let mut msg_size: Vec<u32> = vec![0; batch];
    let mut msg_segs: Vec<u32> = vec![0; batch];

    let mut sizes = SizeSeq::new(&cfg.mix, seed);
    let mut size_counts = vec![0u64; 65536 + 64];
    let mut sent_packets: u64 = 0;
    let mut sent_bytes_l3: u64 = 0;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut send_errors: u64 = 0;
    let mut seq_exhausted = false;

    // --- pacing ------------------------------------------------------------
    let mean = cfg.mix.mean_size();
    let (rate_cost, pps_est) = match cfg.rate {
        Rate::Unpaced => (0.0, f64::INFINITY),
        Rate::Pps(r) => (r * share, r * share),
        Rate::BpsL3(b) => (b * share, b * share / (8.0 * mean)),
    };
    let paced = cfg.rate != Rate::Unpaced;
    // aim for ~100 us between batches when paced, but never more than --batch
    let eff_batch = if paced {
        ((pps_est * 100e-6).ceil() as usize).clamp(1, batch)
    } else {
        batch
    };
    let dur_ns = (cfg.duration_s * 1e9) as u64;

    sys::set_min_timer_slack();
    // all workers start together at t0 (a few ms ahead when there are several)
    sys::sleep_until_mono(t0);
    let t_end = t0 + dur_ns;
    let mut cum_cost: f64 = 0.0; // packets (pps) or L3 bits (bps) scheduled so far
    let mut sock_rr = 0usize;
    let mut batches: u64 = 0;

    'outer: loop {
        if sys::stop_requested() {
            break;
        }
        if paced {
            let due = t0 + (cum_cost * 1e9 / rate_cost) as u64;
            if due >= t_end {
                break;
            }
            let now = sys::mono_ns();
            // a sender that cannot keep up stops at the end time anyway
            // (and reports sender_limited) instead of finishing the schedule
            // (50 ms grace so a briefly descheduled sender still completes
            // the exact schedule)
            if now >= t_end + 50_000_000 {
                break;
            }
            if now < due {
                sys::sleep_until_mono(due);
                if sys::stop_requested() {
                    break;
                }
            }
        } else if sys::mono_ns() >= t_end {
            break;
        }

        let si = sock_rr;
        sock_rr = (sock_rr + 1) % socks.len();
        let npkt = eff_batch;
        // Build the batch: packets are laid out back to back in `bufs`; each
        // mmsghdr is one datagram, or with --gso one run of same-flow,
        // same-size packets sent as a single UDP_SEGMENT super-datagram.
        let mut nmsg = 0usize;
        {
            let s = &mut socks[si];
            let mut boff = 0usize;
            // with GSO a whole batch goes to one flow so it can be coalesced
            let gso_flow = if cfg.gso {
                let f = s.flows[s.rr];
                s.rr = (s.rr + 1) % s.flows.len();
                Some(f)
            } else {
                None
            };
            for _ in 0..npkt {
                let fi = match gso_flow {
                    Some(f) => f,
                    None => {
                        let f = s.flows[s.rr];
                        s.rr += 1;
                        if s.rr == s.flows.len() {
                            s.rr = 0;
                        }
                        f
                    }
                };
                let fl = &mut flows[fi];
                if fl.next_seq > proto::MAX_DATA_SEQ {
                    seq_exhausted = true;
                    break;
                }
                let size = sizes.next_size();
                let plen = (size - ovh) as usize;
                proto::encode_header(&mut bufs[boff..boff + plen], fl.next_seq, sys::now_ns(cfg.clock));
                fl.next_seq += 1;
                if paced {
                    cum_cost += match cfg.rate {
                        Rate::BpsL3(_) => 8.0 * size as f64,
                        _ => 1.0,
                    };
                }
                let extend = cfg.gso
                    && nmsg > 0
                    && msg_flow[nmsg - 1] == fi
                    && msg_size[nmsg - 1] == size
                    && msg_segs[nmsg - 1] < GSO_MAX_SEGS
                    && iovs[nmsg - 1].iov_len + plen <= GSO_MAX_BYTES;
                if extend {
                    iovs[nmsg - 1].iov_len += plen;
                    msg_segs[nmsg - 1] += 1;
                } else {
                    // SAFETY: boff + plen <= bufs.len() (batch * slot).
                    iovs[nmsg].iov_base = unsafe { bufs.as_mut_ptr().add(boff) } as *mut libc::c_void;
                    iovs[nmsg].iov_len = plen;
                    msg_flow[nmsg] = fi;
                    msg_size[nmsg] = size;
                    msg_segs[nmsg] = 1;
                    nmsg += 1;
                }
                boff += plen;
            }
            for m in 0..nmsg {
                let fl = &mut flows[msg_flow[m]];
                let h = &mut msgs[m].msg_hdr;
                h.msg_iov = &mut iovs[m];
                h.msg_iovlen = 1;
                if s.connected {
                    h.msg_name = std::ptr::null_mut();
                    h.msg_namelen = 0;
                } else {
                    h.msg_name = &mut fl.dst_ss as *mut _ as *mut libc::c_void;
                    h.msg_namelen = fl.dst_len;
                }
                if msg_segs[m] > 1 {
                    let cb = &mut cmsgs[m];
                    h.msg_control = cb.as_mut_ptr() as *mut libc::c_void;
                    h.msg_controllen = std::mem::size_of_val(cb);
                    // SAFETY: control buffer is large enough for one u16 cmsg.
                    unsafe {
                        let c = libc::CMSG_FIRSTHDR(h);
                        (*c).cmsg_level = libc::SOL_UDP;
                        (*c).cmsg_type = UDP_SEGMENT;
                        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, (msg_size[m] - ovh) as u16);
                        h.msg_controllen = libc::CMSG_SPACE(2) as usize;
                    }
                } else {
                    h.msg_control = std::ptr::null_mut();
                    h.msg_controllen = 0;
                }
            }
        }
        if nmsg == 0 {
            break;
        }
        batches += 1;
        let fd = socks[si].sock.as_raw_fd();
        let mut off = 0usize;
        while off < nmsg {
            // SAFETY: msgs[off..nmsg] are initialised and point at live buffers.
            let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr().add(off), (nmsg - off) as u32, 0) };
            if r > 0 {
                for m in off..off + r as usize {
                    let (size, segs) = (msg_size[m], msg_segs[m] as u64);
                    flows[msg_flow[m]].sent += segs;
                    size_counts[size as usize] += segs;
                    sent_bytes_l3 += size as u64 * segs;
                    sent_packets += segs;
                }
                off += r as usize;
            } else {
                let e = sys::errno();
                if e == libc::EINTR {
                    if sys::stop_requested() {
                        break 'outer;
                    }
                    continue;
                }
                // count and skip the failing datagram; its seq becomes a gap
                // that the receiver will not count as loss (END carries the
                // number actually sent)
                let segs = msg_segs[off] as u64;
                send_errors += segs;
                *errors.entry(sys::errno_name(e)).or_default() += segs;
                off += 1;
            }
        }
        if seq_exhausted {
            break;
        }
    }
    // paced runs end at the scheduled end time, not at the last batch
    if paced && !sys::stop_requested() && !seq_exhausted {
        let now = sys::mono_ns();
        if now < t_end {
            sys::sleep_until_mono(t_end);
        }
    }
    WorkerOut {
        t_stop: sys::mono_ns(),
        socks,
        flows,
        size_counts,
        sent_packets,
        sent_bytes_l3,
        errors,
        send_errors,
        seq_exhausted,
        batches,
        eff_batch,
    }
}


#[cfg(test)]
mod layout_tests {
    use super::layout;
    use std::collections::HashSet;

    #[test]
    fn classic_layout_is_unchanged() {
        let l = layout(10, 4, 0, 1, None).unwrap();
        assert_eq!(l.iter().map(|s| (s.sock, s.dport)).collect::<Vec<_>>()[..5], [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]);
    }

    #[test]
    fn study_flows_are_100_distinct_tuples_on_100_sockets() {
        let l = layout(100, 100, 5, 5, Some(100)).unwrap();
        let tuples: HashSet<_> = l.iter().map(|s| (s.src, s.src_port, s.dst, s.dport)).collect();
        assert_eq!(tuples.len(), 100);
        assert_eq!(l.iter().map(|s| s.sock).collect::<HashSet<_>>().len(), 100);
        assert_eq!((l[7].src, l[7].src_port, l[7].dst, l[7].dport), (2, 7, 2, 7));
    }

    #[test]
    fn flows_differing_only_by_destination_address_are_refused() {
        assert!(layout(5, 1, 1, 5, Some(1)).is_err());
        assert!(layout(5, 1, 1, 5, None).is_ok()); // one source port per flow
    }
}
