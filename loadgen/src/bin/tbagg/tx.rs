//! The sender: one thread per TUN queue packs inner packets into datagrams for the remote
//! site (the size and time budgets of docs/agg.md) and sends them in sendmmsg batches, with
//! offload segmenting TCP super-packets first and sending runs of equal-sized datagrams as UDP
//! GSO messages.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

use crate::{BATCH, Counters, Offloads, SOL_UDP, WaitHist, offload, tun, wire};

/// With offloads, finished datagrams may queue up to this many before a send (a 64 kB TCP
/// super-packet makes about 45): UDP GSO sends them in a few system calls.
const READY_OFFLOAD: usize = 128;
/// One UDP GSO send: at most this many datagrams, at most this many bytes of UDP payload.
const GSO_SEGS: usize = 64;
const GSO_BYTES: usize = 65000;
/// The smallest inner packet (an IPv4 header alone).
const MIN_PACKET: usize = 20;
const UDP_SEGMENT: libc::c_int = 103;

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
    fn read_done(&mut self, now: u64, super_packet: bool) {
        if !self.out.ready.is_empty() && (super_packet || now >= self.out.oldest_deadline) {
            self.send();
        }
    }
}

/// One TUN queue -> the remote site. Packs packets in arrival order; see the module comment.
#[allow(clippy::too_many_arguments)]
pub fn tx_loop(tun: RawFd, udp: RawFd, vni: u32, flush_ns: u64, limit: usize, c: &Counters, w: &WaitHist,
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
                tx.read_done(now, false);
                continue;
            }
            let h = offload::VnetHdr::parse(&pkt[..skip]);
            let gso = h.gso_type != offload::GSO_NONE;
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
            tx.read_done(now, gso);
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
