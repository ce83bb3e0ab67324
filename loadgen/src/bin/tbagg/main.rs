//! tbagg: the aggregating tunnel's datapath (docs/agg.md).
//!
//! Inner IP packets read from a TUN device are packed, in arrival order, into one UDP datagram
//! for the remote site until the size budget (`--max-payload`, the path MTU minus outer IP and
//! UDP) or the time budget (`--flush-us` after the datagram's first packet; 0 = one packet per
//! datagram) is reached; finished datagrams leave in sendmmsg batches. The receiver reads
//! recvmmsg batches, checks each datagram whole (wire.rs) and writes its packets to its TUN in
//! order. One reader thread per TUN queue, one receiver thread: a flow is read from one queue
//! and written by one thread, so packets of a flow are never reordered.
//!
//! Counters are dumped as JSON to `--stats` at start, on SIGUSR1 and at exit (SIGTERM/SIGINT);
//! the file carries a `dumps` count so a reader can tell a fresh dump from an old one.
//! Errors in the arguments: one line on stderr, exit 2. Ready: a line `tbagg: ready` on stderr.
//!
//! Offloads (`--offload 1`, the default; offload.rs): the TUN carries virtio_net_hdrs with TSO,
//! so a TCP stream is read as 64 kB super-packets that are segmented here to the tunnel MTU
//! before packing (the wire format is unchanged); datagrams of equal size leave as one UDP GSO
//! send (UDP_SEGMENT), arrive as one UDP GRO read (UDP_GRO), and in-order TCP segments of one
//! flow in one receive batch are written back to the TUN as one super-packet.

mod offload;
mod rx;
mod tun;
mod tx;
mod wire;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering::Relaxed};

const BATCH: usize = 32;
const SOL_UDP: libc::c_int = 17;

struct Args {
    dev: String,
    local: SocketAddr,
    remote: SocketAddr,
    vni: u32,
    flush_ns: u64,
    max_payload: usize,
    queues: usize,
    stats: String,
    offload: bool,
}

/// What the kernel granted: vnet headers + TSO on the TUN, UDP GSO and GRO on the socket.
struct Offloads {
    vnet: bool,
    udp_gso: AtomicBool,
    udp_gro: bool,
    /// why offload was asked for and not granted ("" when granted or not asked for)
    refused: String,
}

/// How long each packet waited in tbagg between its read from the TUN and the sendmmsg that
/// carried it: the latency aggregation adds (1 µs buckets up to 65 ms, then one overflow).
struct WaitHist {
    buckets: Vec<AtomicU64>,
    max_us: AtomicU64,
}

const WAIT_BUCKETS: usize = 65536;

impl WaitHist {
    fn new() -> WaitHist {
        WaitHist { buckets: (0..=WAIT_BUCKETS).map(|_| AtomicU64::new(0)).collect(), max_us: AtomicU64::new(0) }
    }
    fn add(&self, ns: u64) {
        let us = ns / 1000;
        self.buckets[(us as usize).min(WAIT_BUCKETS)].fetch_add(1, Relaxed);
        self.max_us.fetch_max(us, Relaxed);
    }
    /// {count, p50, p90, p99, p99_9, max} in µs (a percentile is its bucket's lower edge).
    fn summary(&self) -> serde_json::Value {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let at = |q: f64| -> u64 {
            let want = ((total as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (us, n) in counts.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return us as u64;
                }
            }
            0
        };
        serde_json::json!({"count": total, "p50": at(0.5), "p90": at(0.9), "p99": at(0.99),
                           "p99_9": at(0.999), "max": self.max_us.load(Relaxed)})
    }
}

#[derive(Default)]
struct Counters {
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    tx_datagrams: AtomicU64,
    tx_wire_bytes: AtomicU64,
    tx_errors: AtomicU64,
    tx_flush_size: AtomicU64,
    tx_flush_time: AtomicU64,
    rx_datagrams: AtomicU64,
    rx_wire_bytes: AtomicU64,
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    rx_malformed: AtomicU64,
    rx_write_errors: AtomicU64,
    tx_gso_packets: AtomicU64,
    tx_gso_segments: AtomicU64,
    tx_gso_errors: AtomicU64,
    tx_udp_gso_sends: AtomicU64,
    rx_udp_gro_reads: AtomicU64,
    rx_coalesced: AtomicU64,
    rx_coalesced_segments: AtomicU64,
}

fn usage(msg: &str) -> ! {
    eprintln!("tbagg: {msg} (usage: tbagg --dev NAME --local ADDR:PORT --remote ADDR:PORT \
               --vni N --flush-us N --max-payload BYTES --stats PATH [--queues N] [--offload 0|1])");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let (mut dev, mut local, mut remote, mut stats) = (None, None, None, None);
    let (mut vni, mut flush_us, mut max_payload, mut queues) = (1u32, 50u64, 1472usize, 1usize);
    let mut offload = true;
    while let Some(flag) = it.next() {
        let val = it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let num = |v: &str| v.parse::<u64>().unwrap_or_else(|_| usage(&format!("{flag} {v}: not a number")));
        match flag.as_str() {
            "--dev" => dev = Some(val),
            "--local" => local = Some(val.parse().unwrap_or_else(|_| usage(&format!("--local {val}: not ADDR:PORT")))),
            "--remote" => remote = Some(val.parse().unwrap_or_else(|_| usage(&format!("--remote {val}: not ADDR:PORT")))),
            "--vni" => vni = num(&val) as u32,
            "--flush-us" => flush_us = num(&val),
            "--max-payload" => max_payload = num(&val) as usize,
            "--queues" => queues = num(&val) as usize,
            "--stats" => stats = Some(val),
            "--offload" => {
                offload = match val.as_str() {
                    "1" => true,
                    "0" => false,
                    _ => usage(&format!("--offload {val}: must be 0 or 1")),
                }
            }
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    if !(1..1 << 24).contains(&vni) {
        usage("--vni must be 1..16777215");
    }
    if flush_us > 1_000_000 {
        usage("--flush-us must be 0..1000000");
    }
    if !(wire::HEADER + wire::SEPARATOR + 20..=65507).contains(&max_payload) {
        usage("--max-payload must be 30..65507");
    }
    if !(1..=16).contains(&queues) {
        usage("--queues must be 1..16");
    }
    Args {
        dev: dev.unwrap_or_else(|| usage("--dev is required")),
        local: local.unwrap_or_else(|| usage("--local is required")),
        remote: remote.unwrap_or_else(|| usage("--remote is required")),
        stats: stats.unwrap_or_else(|| usage("--stats is required")),
        vni,
        flush_ns: flush_us * 1000,
        max_payload,
        queues,
        offload,
    }
}

fn fail(what: &str, e: io::Error) -> ! {
    eprintln!("tbagg: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let args = parse_args();
    // Signals go to the main thread's sigwait only: block them before any thread exists.
    let sigs = signal_set();
    // SAFETY: a valid, initialised sigset.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &sigs, std::ptr::null_mut()) };
    let mut refused = String::new();
    let mut vnet = args.offload;
    let fds = match tun::open(&args.dev, args.queues, vnet) {
        Ok(fds) => fds,
        Err(e) if vnet => {
            // an older kernel or a TUN without offload support: run as without --offload
            refused = format!("TUN vnet header/TSO refused: {e}");
            vnet = false;
            tun::open(&args.dev, args.queues, false)
                .unwrap_or_else(|e| fail(&format!("TUN {}", args.dev), e))
        }
        Err(e) => fail(&format!("TUN {}", args.dev), e),
    };
    let sock = UdpSocket::bind(args.local).unwrap_or_else(|e| fail(&format!("bind {}", args.local), e));
    sock.connect(args.remote).unwrap_or_else(|e| fail(&format!("connect {}", args.remote), e));
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, opt, 4 << 20);
    }
    let udp_gro = vnet && setsockopt_int(sock.as_raw_fd(), SOL_UDP, rx::UDP_GRO, 1);
    let offloads = Arc::new(Offloads { vnet, udp_gso: AtomicBool::new(vnet), udp_gro, refused });
    let counters = Arc::new(Counters::default());
    let waits = Arc::new(WaitHist::new());
    let seq = Arc::new(AtomicU16::new(0));
    let udp = sock.as_raw_fd();
    for &fd in &fds {
        tun::set_nonblocking(fd).unwrap_or_else(|e| fail("TUN O_NONBLOCK", e));
        let (c, w, s, o) = (counters.clone(), waits.clone(), seq.clone(), offloads.clone());
        let a = (args.vni, args.flush_ns, args.max_payload);
        std::thread::spawn(move || tx::tx_loop(fd, udp, a.0, a.1, a.2, &c, &w, &s, &o));
    }
    let (c, out, vni, o) = (counters.clone(), fds[0], args.vni, offloads.clone());
    std::thread::spawn(move || rx::rx_loop(udp, out, vni, &c, &o));
    let mut dumps = 0u64;
    dump(&args, &counters, &waits, &offloads, dumps);
    if !offloads.refused.is_empty() {
        eprintln!("tbagg: offload off: {}", offloads.refused);
    }
    eprintln!("tbagg: ready dev {} queues {} flush_us {} max_payload {} offload {}", args.dev,
              args.queues, args.flush_ns / 1000, args.max_payload, offloads.vnet as u8);
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals.
        if unsafe { libc::sigwait(&sigs, &mut sig) } != 0 {
            continue;
        }
        dumps += 1;
        dump(&args, &counters, &waits, &offloads, dumps);
        if sig != libc::SIGUSR1 {
            std::process::exit(0);
        }
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGUSR1, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// One int socket option; false when refused (no CAP_NET_ADMIN for a forced buffer size: the
/// default stays; no UDP_GRO in this kernel: datagrams arrive one by one).
fn setsockopt_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> bool {
    // SAFETY: one int option.
    unsafe {
        libc::setsockopt(fd, level, opt, &val as *const _ as *const libc::c_void,
                         std::mem::size_of::<libc::c_int>() as libc::socklen_t) == 0
    }
}

/// Write the counters atomically (temp file + rename): a reader never sees half a file.
fn dump(args: &Args, c: &Counters, w: &WaitHist, o: &Offloads, dumps: u64) {
    let v = |a: &AtomicU64| a.load(Relaxed);
    let json = serde_json::json!({
        "tool": "tbagg", "dumps": dumps,
        "config": {"dev": args.dev, "queues": args.queues, "flush_us": args.flush_ns / 1000,
                   "max_payload": args.max_payload, "vni": args.vni,
                   "offload_asked": args.offload, "offload": o.vnet,
                   "udp_gso": o.udp_gso.load(Relaxed), "udp_gro": o.udp_gro,
                   "offload_refused": o.refused},
        "counters": {
            "tx_packets": v(&c.tx_packets), "tx_bytes": v(&c.tx_bytes),
            "tx_datagrams": v(&c.tx_datagrams), "tx_wire_bytes": v(&c.tx_wire_bytes),
            "tx_errors": v(&c.tx_errors), "tx_flush_size": v(&c.tx_flush_size),
            "tx_flush_time": v(&c.tx_flush_time),
            "rx_datagrams": v(&c.rx_datagrams), "rx_wire_bytes": v(&c.rx_wire_bytes),
            "rx_packets": v(&c.rx_packets), "rx_bytes": v(&c.rx_bytes),
            "rx_malformed": v(&c.rx_malformed), "rx_write_errors": v(&c.rx_write_errors),
            "tx_gso_packets": v(&c.tx_gso_packets), "tx_gso_segments": v(&c.tx_gso_segments),
            "tx_gso_errors": v(&c.tx_gso_errors), "tx_udp_gso_sends": v(&c.tx_udp_gso_sends),
            "rx_udp_gro_reads": v(&c.rx_udp_gro_reads), "rx_coalesced": v(&c.rx_coalesced),
            "rx_coalesced_segments": v(&c.rx_coalesced_segments),
        },
        "tx_wait_us": w.summary(),
    });
    let tmp = format!("{}.tmp", args.stats);
    if std::fs::write(&tmp, format!("{json}\n")).and_then(|_| std::fs::rename(&tmp, &args.stats)).is_err() {
        eprintln!("tbagg: cannot write {}", args.stats);
    }
}
