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
mod tun;
mod wire;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering::Relaxed};

const BATCH: usize = 32;
const RX_BUF: usize = 65536;
/// With offloads, finished datagrams may queue up to this many before a send (a 64 kB TCP
/// super-packet makes about 45): UDP GSO sends them in a few system calls.
const READY_OFFLOAD: usize = 128;
/// One UDP GSO send: at most this many datagrams, at most this many bytes of UDP payload.
const GSO_SEGS: usize = 64;
const GSO_BYTES: usize = 65000;
const SOL_UDP: libc::c_int = 17;
/// The smallest inner packet (an IPv4 header alone).
const MIN_PACKET: usize = 20;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

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
    let udp_gro = vnet && setsockopt_int(sock.as_raw_fd(), SOL_UDP, UDP_GRO, 1);
    let offloads = Arc::new(Offloads { vnet, udp_gso: AtomicBool::new(vnet), udp_gro, refused });
    let counters = Arc::new(Counters::default());
    let waits = Arc::new(WaitHist::new());
    let seq = Arc::new(AtomicU16::new(0));
    let udp = sock.as_raw_fd();
    for &fd in &fds {
        tun::set_nonblocking(fd).unwrap_or_else(|e| fail("TUN O_NONBLOCK", e));
        let (c, w, s, o) = (counters.clone(), waits.clone(), seq.clone(), offloads.clone());
        let a = (args.vni, args.flush_ns, args.max_payload);
        std::thread::spawn(move || tx_loop(fd, udp, a.0, a.1, a.2, &c, &w, &s, &o));
    }
    let (c, out, vni, o) = (counters.clone(), fds[0], args.vni, offloads.clone());
    std::thread::spawn(move || rx_loop(udp, out, vni, &c, &o));
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
    /// Send every finished datagram: sendmmsg batches, runs of equal-sized datagrams as one
    /// UDP GSO message each while the kernel takes them (`o.udp_gso`; a refusal turns it off
    /// and the rest go one datagram per message, as without offload).
    fn send(&mut self, udp: RawFd, c: &Counters, w: &WaitHist, o: &Offloads) {
        let mut at = 0;
        while at < self.ready.len() {
            let gso = o.udp_gso.load(Relaxed);
            match sendmmsg(udp, &self.ready[at..], gso) {
                Ok((dgrams, gso_msgs)) => {
                    let sent = &self.ready[at..at + dgrams];
                    c.tx_datagrams.fetch_add(sent.len() as u64, Relaxed);
                    c.tx_wire_bytes.fetch_add(sent.iter().map(|d| d.len() as u64).sum(), Relaxed);
                    c.tx_udp_gso_sends.fetch_add(gso_msgs as u64, Relaxed);
                    at += dgrams;
                }
                Err(e) if gso && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)) => {
                    o.udp_gso.store(false, Relaxed);
                }
                Err(_) => {
                    // ECONNREFUSED (peer not up yet), ENOBUFS: these datagrams are lost
                    c.tx_errors.fetch_add((self.ready.len() - at) as u64, Relaxed);
                    break;
                }
            }
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

/// Runs of datagrams one UDP GSO message may carry: equal sizes, only the last may be shorter.
fn gso_runs(bufs: &[Vec<u8>], gso: bool, max_msgs: usize) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < bufs.len() && runs.len() < max_msgs {
        let size = bufs[i].len();
        let (mut j, mut total) = (i + 1, size);
        while gso && j < bufs.len() && j - i < GSO_SEGS && bufs[j - 1].len() == size
            && bufs[j].len() <= size && total + bufs[j].len() <= GSO_BYTES
        {
            total += bufs[j].len();
            j += 1;
        }
        runs.push(i..j);
        i = j;
    }
    runs
}

/// One sendmmsg of up to BATCH messages over `bufs`; Ok(datagrams sent, of which messages
/// sent with UDP_SEGMENT), Err with the errno when the first message failed.
fn sendmmsg(udp: RawFd, bufs: &[Vec<u8>], gso: bool) -> io::Result<(usize, usize)> {
    let runs = gso_runs(bufs, gso, BATCH);
    let n = runs.len();
    let end = runs.last().map_or(0, |r| r.end);
    let mut iov: Vec<libc::iovec> = bufs[..end]
        .iter()
        .map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    let mut ctl = vec![0u64; n * space.div_ceil(8)];
    // SAFETY: zeroed mmsghdr is valid (no name: the socket is connected).
    let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (k, (m, r)) in msgs.iter_mut().zip(runs.iter()).enumerate() {
        m.msg_hdr.msg_iov = iov[r.start..].as_mut_ptr();
        m.msg_hdr.msg_iovlen = r.len();
        if r.len() > 1 {
            let c = ctl[k * space.div_ceil(8)..].as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_control = c;
            m.msg_hdr.msg_controllen = space;
            // SAFETY: the control buffer holds one cmsg of a u16, 8-byte aligned.
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                (*cm).cmsg_level = SOL_UDP;
                (*cm).cmsg_type = UDP_SEGMENT;
                (*cm).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut u16, bufs[r.start].len() as u16);
            }
        }
    }
    loop {
        // SAFETY: n headers, each pointing at live iovecs over live buffers and a live cmsg.
        let r = unsafe { libc::sendmmsg(udp, msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        let sent = &runs[..r as usize];
        return Ok((sent.last().map_or(0, |r| r.end), sent.iter().filter(|r| r.len() > 1).count()));
    }
}

/// One sender thread's state: the datagram being packed and the finished ones.
struct Tx<'a> {
    udp: RawFd,
    vni: u32,
    flush_ns: u64,
    c: &'a Counters,
    w: &'a WaitHist,
    seq: &'a AtomicU16,
    o: &'a Offloads,
    enc: wire::Encoder,
    deadline: u64,
    out: Outbox,
    limit: usize,
    ready_max: usize,
}

impl Tx<'_> {
    fn finish(&mut self) {
        let next = self.out.spare.pop().unwrap_or_else(|| Vec::with_capacity(self.limit));
        self.out.ready.push(std::mem::replace(&mut self.enc.buf, next));
        self.out.oldest_deadline = self.out.oldest_deadline.min(self.deadline);
        self.out.ready_packets += self.enc.count;
        self.enc.count = 0;
    }

    fn send(&mut self) {
        self.out.send(self.udp, self.c, self.w, self.o);
    }

    /// One inner packet read at `now`: into the open datagram, or closing it first.
    fn packet(&mut self, p: &[u8], now: u64) {
        let c = self.c;
        self.out.stamps.push_back(now);
        if !self.enc.is_empty() && !self.enc.fits(p.len()) {
            c.tx_flush_size.fetch_add(1, Relaxed);
            self.finish();
        }
        if self.enc.is_empty() {
            self.enc.start(self.vni, self.seq.fetch_add(1, Relaxed));
            self.deadline = now.saturating_add(self.flush_ns);
        }
        self.enc.push(p);
        c.tx_packets.fetch_add(1, Relaxed);
        c.tx_bytes.fetch_add(p.len() as u64, Relaxed);
        if now >= self.deadline {
            c.tx_flush_time.fetch_add(1, Relaxed);
            self.finish();
        } else if !self.enc.fits(MIN_PACKET) {
            // full: no IP packet fits any more (a full-size TCP segment leaves 12 bytes);
            // waiting out the timeout would only delay it
            c.tx_flush_size.fetch_add(1, Relaxed);
            self.finish();
        }
        if self.out.ready.len() >= self.ready_max {
            self.send();
        }
    }

    /// After one TUN read (a packet, or all the segments of a super-packet, which therefore
    /// leave together, in as few UDP GSO sends as their sizes allow): send what is due.
    fn read_done(&mut self, now: u64) {
        if !self.out.ready.is_empty() && now >= self.out.oldest_deadline {
            self.send();
        }
    }
}

/// One TUN queue -> the remote site. Packs packets in arrival order; see the module comment.
#[allow(clippy::too_many_arguments)]
fn tx_loop(tun: RawFd, udp: RawFd, vni: u32, flush_ns: u64, limit: usize, c: &Counters, w: &WaitHist,
           seq: &AtomicU16, o: &Offloads) {
    tun::tight_timer_slack();
    let mut tx = Tx {
        udp, vni, flush_ns, c, w, seq, o, limit,
        enc: wire::Encoder::new(limit),
        deadline: u64::MAX,
        out: Outbox {
            ready: Vec::new(),
            spare: Vec::new(),
            oldest_deadline: u64::MAX,
            stamps: std::collections::VecDeque::new(),
            ready_packets: 0,
        },
        ready_max: if o.vnet { READY_OFFLOAD } else { BATCH },
    };
    let skip = if o.vnet { offload::VNET_HDR } else { 0 };
    let mut pkt = vec![0u8; 65536 + skip];
    let (mut segs, mut lens) = (Vec::with_capacity(65536 + 64 * 80), Vec::with_capacity(64));
    loop {
        // SAFETY: reads at most pkt.len() bytes into pkt.
        let n = unsafe { libc::read(tun, pkt.as_mut_ptr() as *mut libc::c_void, pkt.len()) };
        if n > skip as isize {
            let now = tun::now_ns();
            if !o.vnet {
                tx.packet(&pkt[..n as usize], now);
                tx.read_done(now);
                continue;
            }
            let h = offload::VnetHdr::parse(&pkt[..skip]);
            let p = &mut pkt[skip..n as usize];
            if h.gso_type != offload::GSO_NONE {
                segs.clear();
                lens.clear();
                if offload::segment(p, &h, &mut segs, &mut lens).is_err() {
                    c.tx_gso_errors.fetch_add(1, Relaxed);
                    continue;
                }
                c.tx_gso_packets.fetch_add(1, Relaxed);
                c.tx_gso_segments.fetch_add(lens.len() as u64, Relaxed);
                let mut at = 0;
                for &l in &lens {
                    tx.packet(&segs[at..at + l], now);
                    at += l;
                }
            } else {
                if h.flags & offload::F_NEEDS_CSUM != 0 && offload::finish_checksum(p, &h).is_err() {
                    c.tx_gso_errors.fetch_add(1, Relaxed);
                    continue;
                }
                tx.packet(p, now);
            }
            tx.read_done(now);
            continue;
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // the queue is empty: send what is finished, then wait for more or for the deadline
        if !tx.out.ready.is_empty() {
            tx.send();
        }
        if tx.enc.is_empty() {
            tun::wait_readable(tun, None);
            continue;
        }
        let now = tun::now_ns();
        if now >= tx.deadline {
            c.tx_flush_time.fetch_add(1, Relaxed);
            tx.finish();
            tx.send();
        } else {
            tun::wait_readable(tun, Some(tx.deadline - now));
        }
    }
}

/// Write one packet to the TUN, behind a virtio_net_hdr when the device has them.
fn tun_write(tun: RawFd, hdr: Option<&[u8; offload::VNET_HDR]>, p: &[u8]) -> bool {
    let iov = [
        libc::iovec { iov_base: hdr.map_or(std::ptr::null(), |h| h.as_ptr()) as *mut libc::c_void,
                      iov_len: hdr.map_or(0, |h| h.len()) },
        libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() },
    ];
    let (iov, cnt) = if hdr.is_some() { (&iov[..], 2) } else { (&iov[1..], 1) };
    // SAFETY: writes from live slices.
    unsafe { libc::writev(tun, iov.as_ptr(), cnt) >= 0 }
}

/// The remote site -> our TUN: recvmmsg batches, each datagram checked whole, packets in order
/// (with offload: UDP GRO reads split back into datagrams, in-order TCP segments of a flow
/// within the batch written as one super-packet).
fn rx_loop(udp: RawFd, tun: RawFd, vni: u32, c: &Counters, o: &Offloads) {
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; RX_BUF]).collect();
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let per = space.div_ceil(8);
    let mut ctl = vec![0u64; BATCH * per];
    // SAFETY: zeroed mmsghdr is valid; each gets one iovec below.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut gro = offload::Gro::default();
    let mut write = |h: &[u8; offload::VNET_HDR], p: &[u8]| {
        let vh = offload::VnetHdr::parse(h);
        let (segs, bytes) = if vh.gso_type == offload::GSO_NONE {
            (1, p.len())
        } else {
            let hl = vh.hdr_len as usize;
            let n = (p.len() - hl).div_ceil(vh.gso_size as usize);
            (n, p.len() + (n - 1) * hl)
        };
        if tun_write(tun, o.vnet.then_some(h), p) {
            c.rx_packets.fetch_add(segs as u64, Relaxed);
            c.rx_bytes.fetch_add(bytes as u64, Relaxed);
        } else {
            c.rx_write_errors.fetch_add(segs as u64, Relaxed);
        }
    };
    loop {
        if o.udp_gro {
            for (k, m) in msgs.iter_mut().enumerate() {
                m.msg_hdr.msg_control = ctl[k * per..].as_mut_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_controllen = space;
            }
        }
        // SAFETY: BATCH headers over BATCH live buffers; blocks for the first datagram.
        let r = unsafe {
            libc::recvmmsg(udp, msgs.as_mut_ptr(), BATCH as libc::c_uint, libc::MSG_WAITFORONE, std::ptr::null_mut())
        };
        if r <= 0 {
            continue; // EINTR, or ECONNREFUSED from an ICMP error for an earlier send
        }
        for (i, m) in msgs[..r as usize].iter_mut().enumerate() {
            let len = m.msg_len as usize;
            let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            m.msg_hdr.msg_flags = 0;
            let seg = if o.udp_gro { gro_size(&m.msg_hdr).unwrap_or(len) } else { len };
            if seg < len {
                c.rx_udp_gro_reads.fetch_add(1, Relaxed);
            }
            for d in bufs[i][..len].chunks(seg.max(1)) {
                c.rx_datagrams.fetch_add(1, Relaxed);
                c.rx_wire_bytes.fetch_add(d.len() as u64, Relaxed);
                match wire::decode(d, vni) {
                    Ok(d) if !truncated => {
                        for p in d.packets {
                            if o.vnet {
                                gro.offer(p, &mut write);
                            } else {
                                write(&[0; offload::VNET_HDR], p);
                            }
                        }
                    }
                    _ => {
                        c.rx_malformed.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        gro.flush(&mut write);
        c.rx_coalesced.store(gro.coalesced, Relaxed);
        c.rx_coalesced_segments.store(gro.coalesced_segments, Relaxed);
    }
}

/// The segment size of a UDP GRO read (its UDP_GRO control message), if it carried one.
fn gro_size(h: &libc::msghdr) -> Option<usize> {
    // SAFETY: walks the control messages recvmmsg wrote into this header's buffer.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(h);
        while !cm.is_null() {
            if (*cm).cmsg_level == SOL_UDP && (*cm).cmsg_type == UDP_GRO {
                return Some(std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::c_int) as usize);
            }
            cm = libc::CMSG_NXTHDR(h, cm);
        }
    }
    None
}
