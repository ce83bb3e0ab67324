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

mod tun;
mod wire;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};

const BATCH: usize = 32;
const RX_BUF: usize = 65536;

struct Args {
    dev: String,
    local: SocketAddr,
    remote: SocketAddr,
    vni: u32,
    flush_ns: u64,
    max_payload: usize,
    queues: usize,
    stats: String,
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
}

fn usage(msg: &str) -> ! {
    eprintln!("tbagg: {msg} (usage: tbagg --dev NAME --local ADDR:PORT --remote ADDR:PORT \
               --vni N --flush-us N --max-payload BYTES --stats PATH [--queues N])");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let (mut dev, mut local, mut remote, mut stats) = (None, None, None, None);
    let (mut vni, mut flush_us, mut max_payload, mut queues) = (1u32, 50u64, 1472usize, 1usize);
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
    let fds = tun::open(&args.dev, args.queues).unwrap_or_else(|e| fail(&format!("TUN {}", args.dev), e));
    let sock = UdpSocket::bind(args.local).unwrap_or_else(|e| fail(&format!("bind {}", args.local), e));
    sock.connect(args.remote).unwrap_or_else(|e| fail(&format!("connect {}", args.remote), e));
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        setsockopt_int(sock.as_raw_fd(), opt, 4 << 20);
    }
    let counters = Arc::new(Counters::default());
    let waits = Arc::new(WaitHist::new());
    let seq = Arc::new(AtomicU16::new(0));
    let udp = sock.as_raw_fd();
    for &fd in &fds {
        tun::set_nonblocking(fd).unwrap_or_else(|e| fail("TUN O_NONBLOCK", e));
        let (c, w, s) = (counters.clone(), waits.clone(), seq.clone());
        let a = (args.vni, args.flush_ns, args.max_payload);
        std::thread::spawn(move || tx_loop(fd, udp, a.0, a.1, a.2, &c, &w, &s));
    }
    let (c, out, vni) = (counters.clone(), fds[0], args.vni);
    std::thread::spawn(move || rx_loop(udp, out, vni, &c));
    let mut dumps = 0u64;
    dump(&args, &counters, &waits, dumps);
    eprintln!("tbagg: ready dev {} queues {} flush_us {} max_payload {}", args.dev, args.queues,
              args.flush_ns / 1000, args.max_payload);
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals.
        if unsafe { libc::sigwait(&sigs, &mut sig) } != 0 {
            continue;
        }
        dumps += 1;
        dump(&args, &counters, &waits, dumps);
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

fn setsockopt_int(fd: RawFd, opt: libc::c_int, val: libc::c_int) {
    // SAFETY: one int option; failure (no CAP_NET_ADMIN) leaves the default buffer.
    unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, opt, &val as *const _ as *const libc::c_void,
                         std::mem::size_of::<libc::c_int>() as libc::socklen_t);
    }
}

/// Write the counters atomically (temp file + rename): a reader never sees half a file.
fn dump(args: &Args, c: &Counters, w: &WaitHist, dumps: u64) {
    let v = |a: &AtomicU64| a.load(Relaxed);
    let json = serde_json::json!({
        "tool": "tbagg", "dumps": dumps,
        "config": {"dev": args.dev, "queues": args.queues, "flush_us": args.flush_ns / 1000,
                   "max_payload": args.max_payload, "vni": args.vni},
        "counters": {
            "tx_packets": v(&c.tx_packets), "tx_bytes": v(&c.tx_bytes),
            "tx_datagrams": v(&c.tx_datagrams), "tx_wire_bytes": v(&c.tx_wire_bytes),
            "tx_errors": v(&c.tx_errors), "tx_flush_size": v(&c.tx_flush_size),
            "tx_flush_time": v(&c.tx_flush_time),
            "rx_datagrams": v(&c.rx_datagrams), "rx_wire_bytes": v(&c.rx_wire_bytes),
            "rx_packets": v(&c.rx_packets), "rx_bytes": v(&c.rx_bytes),
            "rx_malformed": v(&c.rx_malformed), "rx_write_errors": v(&c.rx_write_errors),
        },
        "tx_wait_us": w.summary(),
    });
    let tmp = format!("{}.tmp", args.stats);
    if std::fs::write(&tmp, format!("{json}\n")).and_then(|_| std::fs::rename(&tmp, &args.stats)).is_err() {
        eprintln!("tbagg: cannot write {}", args.stats);
    }
}

/// Datagrams finished but not yet sent, and spare buffers to build the next ones in.
struct Outbox {
    ready: Vec<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    oldest_deadline: u64,
    /// read time of every packet not sent yet (those in `ready`, then the open datagram's)
    stamps: std::collections::VecDeque<u64>,
    ready_packets: usize,
}

impl Outbox {
    fn send(&mut self, udp: RawFd, c: &Counters, w: &WaitHist) {
        let mut at = 0;
        while at < self.ready.len() {
            let n = sendmmsg(udp, &self.ready[at..]);
            if n <= 0 {
                // ECONNREFUSED (peer not up yet), ENOBUFS: these datagrams are lost
                c.tx_errors.fetch_add((self.ready.len() - at) as u64, Relaxed);
                break;
            }
            let sent = &self.ready[at..at + n as usize];
            c.tx_datagrams.fetch_add(sent.len() as u64, Relaxed);
            c.tx_wire_bytes.fetch_add(sent.iter().map(|d| d.len() as u64).sum(), Relaxed);
            at += n as usize;
        }
        self.spare.append(&mut self.ready);
        self.oldest_deadline = u64::MAX;
        let now = tun::now_ns();
        for t in self.stamps.drain(..self.ready_packets) {
            w.add(now.saturating_sub(t));
        }
        self.ready_packets = 0;
    }
}

fn sendmmsg(udp: RawFd, bufs: &[Vec<u8>]) -> libc::c_int {
    let n = bufs.len().min(BATCH);
    let mut iov: Vec<libc::iovec> = bufs[..n]
        .iter()
        .map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    // SAFETY: zeroed mmsghdr is valid (no name: the socket is connected).
    let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    loop {
        // SAFETY: n headers, each pointing at one live iovec over a live buffer.
        let r = unsafe { libc::sendmmsg(udp, msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return r;
    }
}

/// One TUN queue -> the remote site. Packs packets in arrival order; see the module comment.
#[allow(clippy::too_many_arguments)]
fn tx_loop(tun: RawFd, udp: RawFd, vni: u32, flush_ns: u64, limit: usize, c: &Counters, w: &WaitHist,
           seq: &AtomicU16) {
    tun::tight_timer_slack();
    let mut enc = wire::Encoder::new(limit);
    let mut deadline = u64::MAX;
    let mut out = Outbox {
        ready: Vec::new(),
        spare: Vec::new(),
        oldest_deadline: u64::MAX,
        stamps: std::collections::VecDeque::new(),
        ready_packets: 0,
    };
    let mut pkt = vec![0u8; 65536];
    let finish = |enc: &mut wire::Encoder, out: &mut Outbox, deadline: u64| {
        let next = out.spare.pop().unwrap_or_else(|| Vec::with_capacity(limit));
        out.ready.push(std::mem::replace(&mut enc.buf, next));
        out.oldest_deadline = out.oldest_deadline.min(deadline);
        out.ready_packets += enc.count;
        enc.count = 0;
    };
    loop {
        // SAFETY: reads at most pkt.len() bytes into pkt.
        let n = unsafe { libc::read(tun, pkt.as_mut_ptr() as *mut libc::c_void, pkt.len()) };
        if n > 0 {
            let p = &pkt[..n as usize];
            let now = tun::now_ns();
            out.stamps.push_back(now);
            if !enc.is_empty() && !enc.fits(p.len()) {
                c.tx_flush_size.fetch_add(1, Relaxed);
                finish(&mut enc, &mut out, deadline);
            }
            if enc.is_empty() {
                enc.start(vni, seq.fetch_add(1, Relaxed));
                deadline = now.saturating_add(flush_ns);
            }
            enc.push(p);
            c.tx_packets.fetch_add(1, Relaxed);
            c.tx_bytes.fetch_add(p.len() as u64, Relaxed);
            if now >= deadline {
                c.tx_flush_time.fetch_add(1, Relaxed);
                finish(&mut enc, &mut out, deadline);
            }
            if out.ready.len() >= BATCH || (!out.ready.is_empty() && now >= out.oldest_deadline) {
                out.send(udp, c, w);
            }
            continue;
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // the queue is empty: send what is finished, then wait for more or for the deadline
        if !out.ready.is_empty() {
            out.send(udp, c, w);
        }
        if enc.is_empty() {
            tun::wait_readable(tun, None);
            continue;
        }
        let now = tun::now_ns();
        if now >= deadline {
            c.tx_flush_time.fetch_add(1, Relaxed);
            finish(&mut enc, &mut out, deadline);
            out.send(udp, c, w);
        } else {
            tun::wait_readable(tun, Some(deadline - now));
        }
    }
}

/// The remote site -> our TUN: recvmmsg batches, each datagram checked whole, packets in order.
fn rx_loop(udp: RawFd, tun: RawFd, vni: u32, c: &Counters) {
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; RX_BUF]).collect();
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    // SAFETY: zeroed mmsghdr is valid; each gets one iovec below.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    loop {
        // SAFETY: BATCH headers over BATCH live buffers; blocks for the first datagram.
        let r = unsafe {
            libc::recvmmsg(udp, msgs.as_mut_ptr(), BATCH as libc::c_uint, libc::MSG_WAITFORONE, std::ptr::null_mut())
        };
        if r <= 0 {
            continue; // EINTR, or ECONNREFUSED from an ICMP error for an earlier send
        }
        for (i, m) in msgs[..r as usize].iter_mut().enumerate() {
            let len = m.msg_len as usize;
            c.rx_datagrams.fetch_add(1, Relaxed);
            c.rx_wire_bytes.fetch_add(len as u64, Relaxed);
            let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            m.msg_hdr.msg_flags = 0;
            match wire::decode(&bufs[i][..len], vni) {
                Ok(d) if !truncated => {
                    for p in d.packets {
                        // SAFETY: writes one packet from a live slice.
                        let w = unsafe { libc::write(tun, p.as_ptr() as *const libc::c_void, p.len()) };
                        if w < 0 {
                            c.rx_write_errors.fetch_add(1, Relaxed);
                        } else {
                            c.rx_packets.fetch_add(1, Relaxed);
                            c.rx_bytes.fetch_add(p.len() as u64, Relaxed);
                        }
                    }
                }
                _ => {
                    c.rx_malformed.fetch_add(1, Relaxed);
                }
            }
        }
    }
}
