//! Capture receiver: counts the generator's packets where the site's devices
//! receive them, from an AF_PACKET TPACKET_V3 ring, the way a hardware
//! tester counts frames at its receive port.
//!
//! Why: with sockets, every packet also crosses the receiving site's IP/UDP
//! stack and a recvmmsg copy. On a small host that stack, not the tunnel,
//! limits the load a search can offer. The ring is filled by the kernel in
//! the receive path itself (before tc ingress), one wake-up per block; a tc
//! ingress eBPF filter installed by tunbench (testbed/bpfdrop.py) then drops
//! the packets so the far site's stack does no further work.
//!
//! - One ring on all devices of the namespace (ifindex 0), outgoing packets
//!   ignored; a classic BPF socket filter keeps only UDP to our ports (IPv4
//!   without options, IPv6 without extension headers) and snaps each to
//!   SNAP bytes, enough for the headers and the loadgen header.
//! - Destination address must equal --bind unless --bind is unspecified.
//! - Sizes come from the IP header; kernel timestamps from the ring.
//! - The ports are also bound as UDP "sink" sockets with a tiny buffer, so
//!   without the tc drop nothing answers with ICMP port-unreachable (which
//!   would make the sender's connected sockets fail).
//! - Ring drops (PACKET_STATISTICS tp_drops) are reported as socket_drops.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use serde_json::{Map, Value, json};

use crate::CliError;
use crate::acct::{self, Acct, FlowKey, Limits};
use crate::recv::{RecvCfg, bind_ports};
use crate::sys::{self, Clock};

const ETH_P_ALL: u16 = 0x0003;
const PACKET_RX_RING: i32 = 5;
const PACKET_STATISTICS: i32 = 6;
const PACKET_VERSION: i32 = 10;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const TPACKET_V3: i32 = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// Bytes kept per packet: Ethernet + IPv6 + UDP + the 54-byte END payload fit.
pub const SNAP: u32 = 160;
const BLOCK_SIZE: u32 = 1 << 20;
const FRAME_SIZE: u32 = 2048;
const RETIRE_MS: u32 = 2;

#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// Classic BPF: accept UDP to ports lo..=hi (snap SNAP bytes), drop the rest.
pub fn socket_filter(lo: u16, hi: u16) -> Vec<libc::sock_filter> {
    const NET: u32 = 0xfff0_0000; // SKF_NET_OFF
    const PROTO: u32 = 0xffff_f000; // SKF_AD_OFF + SKF_AD_PROTOCOL
    let st = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
    let jmp = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    let (ld_h, ld_b, jeq, jge, jgt, ja, ret) = (0x28, 0x30, 0x15, 0x35, 0x25, 0x05, 0x06);
    vec![
        st(ld_h, PROTO),             // 0: A = skb->protocol
        jmp(jeq, 0x0800, 0, 6),      // 1: IPv4 ? 2 : 8
        st(ld_b, NET),               // 2: version/IHL
        jmp(jeq, 0x45, 0, 11),       // 3: no options, else drop (15)
        st(ld_b, NET + 9),           // 4: protocol
        jmp(jeq, 17, 0, 9),          // 5: UDP, else drop
        st(ld_h, NET + 22),          // 6: dport
        st(ja, 4),                   // 7: -> 12
        jmp(jeq, 0x86dd, 0, 6),      // 8: IPv6, else drop
        st(ld_b, NET + 6),           // 9: next header
        jmp(jeq, 17, 0, 4),          // 10: UDP, else drop
        st(ld_h, NET + 42),          // 11: dport
        jmp(jge, lo as u32, 0, 2),   // 12: dport >= lo, else drop
        jmp(jgt, hi as u32, 1, 0),   // 13: dport > hi: drop
        st(ret, SNAP),               // 14: accept
        st(ret, 0),                  // 15: drop
    ]
}

fn setsockopt<T>(fd: RawFd, level: i32, name: i32, val: &T, what: &str) -> Result<(), CliError> {
    sys::setsockopt(fd, level, name, val).map_err(|e| {
        CliError::new(
            format!("capture: {what}: {e}"),
            "run as root (CAP_NET_RAW) on a kernel with CONFIG_PACKET, or drop --capture",
        )
    })
}

struct Ring {
    fd: OwnedFd,
    map: *mut u8,
    len: usize,
    blocks: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: map/len come from a successful mmap.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}

fn open_ring(lo: u16, hi: u16, ring_mb: u32) -> Result<Ring, CliError> {
    // SAFETY: plain socket(2).
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, (ETH_P_ALL.to_be()) as i32) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        return Err(CliError::new(
            format!("capture: cannot open an AF_PACKET socket: {e}"),
            "run as root (CAP_NET_RAW) on a kernel with CONFIG_PACKET, or drop --capture",
        ));
    }
    // SAFETY: raw is a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let f = fd.as_raw_fd();
    let prog = socket_filter(lo, hi);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    setsockopt(f, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog, "socket filter")?;
    setsockopt(f, libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V3, "TPACKET_V3")?;
    setsockopt(f, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32, "PACKET_IGNORE_OUTGOING")?;
    let blocks = (ring_mb.clamp(1, 1024) as u64 * (1 << 20) / BLOCK_SIZE as u64) as u32;
    let req = TpacketReq3 {
        block_size: BLOCK_SIZE,
        block_nr: blocks,
        frame_size: FRAME_SIZE,
        frame_nr: BLOCK_SIZE / FRAME_SIZE * blocks,
        retire_blk_tov: RETIRE_MS,
        sizeof_priv: 0,
        feature_req_word: 0,
    };
    setsockopt(f, libc::SOL_PACKET, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
    let len = BLOCK_SIZE as usize * blocks as usize;
    // SAFETY: mapping the ring the kernel just allocated for this socket.
    let map = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f, 0)
    };
    if map == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(CliError::new(format!("capture: cannot map the ring: {e}"), "lower --ring-mb"));
    }
    let ring = Ring {
        fd,
        map: map as *mut u8,
        len,
        blocks: blocks as usize,
    };
    // SAFETY: sockaddr_ll is plain data; ifindex 0 = every device.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = 0;
    // SAFETY: sll is a valid sockaddr_ll.
    let r = unsafe {
        libc::bind(f, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32)
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(CliError::new(format!("capture: cannot bind the ring: {e}"), "drop --capture"));
    }
    Ok(ring)
}

#[inline]
fn rd32(p: *const u8, off: usize) -> u32 {
    // SAFETY: callers pass offsets inside the mapped ring.
    unsafe { std::ptr::read_unaligned(p.add(off) as *const u32) }
}
#[inline]
fn rd16(p: *const u8, off: usize) -> u16 {
    // SAFETY: as above.
    unsafe { std::ptr::read_unaligned(p.add(off) as *const u16) }
}

/// A captured packet's flow key, UDP payload and IP total length, if it is
/// UDP to one of our ports (and to --bind unless that is unspecified).
#[inline]
pub fn parse_l3<'a>(net: &'a [u8], bind: &[u8; 16], bind_any: bool, map_v4: bool, lo: u16, hi: u16) -> Option<(FlowKey, &'a [u8], u64)> {
    let ver = *net.first()? >> 4;
    let (mut addr, sport, dport, l3, payload) = if ver == 4 {
        if net.len() < 28 || net[0] != 0x45 || net[9] != 17 {
            return None;
        }
        let total = u16::from_be_bytes([net[2], net[3]]) as usize;
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&net[12..16]);
        if !bind_any && (net[16..20] != bind[..4] || bind[4..] != [0u8; 12]) {
            return None;
        }
        let end = total.min(net.len());
        (a, &net[20..22], &net[22..24], total as u64, net.get(28..end)?)
    } else if ver == 6 {
        if net.len() < 48 || net[6] != 17 {
            return None;
        }
        let plen = u16::from_be_bytes([net[4], net[5]]) as usize;
        let mut a = [0u8; 16];
        a.copy_from_slice(&net[8..24]);
        if !bind_any && net[24..40] != bind[..] {
            return None;
        }
        let end = (40 + plen).min(net.len());
        (a, &net[40..42], &net[42..44], 40 + plen as u64, net.get(48..end)?)
    } else {
        return None;
    };
    let sport = u16::from_be_bytes([sport[0], sport[1]]);
    let dport = u16::from_be_bytes([dport[0], dport[1]]);
    if dport < lo || dport > hi {
        return None;
    }
    if ver == 4 && map_v4 {
        // an IPv6 (::) receiver keys IPv4 senders as ::ffff:a.b.c.d, like a dual-stack socket
        addr = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, addr[0], addr[1], addr[2], addr[3]];
    }
    Some((FlowKey { addr, sport, dport }, payload, l3))
}

pub fn run(cfg: &RecvCfg) -> Result<Value, CliError> {
    let v6 = cfg.bind.is_ipv6();
    let k = cfg.ports_count.max(1);
    let (lo, hi) = (cfg.port, cfg.port + (k - 1));
    // sinks first: they also prove the address exists and the ports are free
    let (_sinks, _, _, _) = bind_ports(cfg, 4096)?;
    let ring = open_ring(lo, hi, cfg.ring_mb)?;
    let (bind, bind_any) = match cfg.bind {
        std::net::IpAddr::V4(a) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a.octets());
            (b, a.is_unspecified())
        }
        std::net::IpAddr::V6(a) => (a.octets(), a.is_unspecified()),
    };
    eprintln!("ready");

    let mut acct = Acct::new(cfg.clock, cfg.drain_ms * 1_000_000);
    let lim = Limits::new(cfg.timeout_idle_s, cfg.max_seconds);
    let start_clock_ns = sys::now_ns(cfg.clock);
    let mut pfd = libc::pollfd {
        fd: ring.fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    let mut cur = 0usize;
    let mut blocks_read = 0u64;
    let mut foreign = 0u64;
    let stop_reason: &str;
    loop {
        if sys::stop_requested() {
            stop_reason = "signal";
            break;
        }
        // SAFETY: cur < blocks; the block descriptor is at its start.
        let bd = unsafe { ring.map.add(cur * BLOCK_SIZE as usize) };
        let status = unsafe { std::ptr::read_volatile(bd.add(8) as *const u32) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        if status & TP_STATUS_USER != 0 {
            let num = rd32(bd, 12) as usize;
            let mut off = rd32(bd, 16) as usize;
            let now_m = sys::mono_ns();
            let now_c = if cfg.clock == Clock::Monotonic { now_m } else { sys::now_ns(cfg.clock) };
            let real_minus_c = acct::real_minus(cfg.clock, now_c);
            acct.last_activity_mono = now_m;
            for _ in 0..num {
                // SAFETY: offsets written by the kernel stay inside the block.
                let h = unsafe { bd.add(off) };
                let next = rd32(h, 0) as usize;
                let (sec, nsec, snap) = (rd32(h, 4), rd32(h, 8), rd32(h, 12) as usize);
                let (mac, net) = (rd16(h, 24) as usize, rd16(h, 26) as usize);
                let avail = snap.saturating_sub(net.saturating_sub(mac));
                // SAFETY: the kernel copied `snap` bytes from tp_mac; net >= mac.
                let l3 = unsafe { std::slice::from_raw_parts(h.add(net), avail) };
                match parse_l3(l3, &bind, bind_any, v6, lo, hi) {
                    Some((key, payload, size)) => {
                        let real = sec as i128 * 1_000_000_000 + nsec as i128;
                        let rx_c = match acct::kernel_ts(real, real_minus_c, now_c) {
                            Some(v) => {
                                acct.kts_used += 1;
                                v
                            }
                            None => now_c,
                        };
                        acct.packet(key, payload, size, rx_c, now_m, now_c);
                    }
                    None => foreign += 1,
                }
                off += next;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            // SAFETY: handing the block back to the kernel.
            unsafe { std::ptr::write_volatile(bd.add(8) as *mut u32, TP_STATUS_KERNEL) };
            cur = (cur + 1) % ring.blocks;
            blocks_read += 1;
        }
        let now = sys::mono_ns();
        if let Some(r) = acct.stop_reason(now, &lim) {
            stop_reason = r;
            break;
        }
        if status & TP_STATUS_USER != 0 {
            continue; // the next block may be ready too
        }
        // the kernel wakes us once per retired block (<= RETIRE_MS), not per packet
        let ms = acct.wait_budget_ns(now, &lim).div_ceil(1_000_000) as i32;
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }
    // tpacket_stats_v3: packets, drops, freeze_q_cnt (reset on read)
    let mut st = [0u32; 3];
    let mut sl = std::mem::size_of_val(&st) as u32;
    // SAFETY: st is large enough for tpacket_stats_v3.
    let ok = unsafe {
        libc::getsockopt(ring.fd.as_raw_fd(), libc::SOL_PACKET, PACKET_STATISTICS, st.as_mut_ptr() as *mut libc::c_void, &mut sl)
    } == 0;
    let mut io = Map::new();
    io.insert("bind".into(), json!(cfg.bind.to_string()));
    io.insert("port".into(), json!(cfg.port));
    io.insert("ports_count".into(), json!(k));
    io.insert("capture".into(), json!(true));
    io.insert("socket_drops".into(), if ok { json!(st[1]) } else { Value::Null });
    io.insert("capture_ring_packets".into(), if ok { json!(st[0]) } else { Value::Null });
    io.insert("capture_ring_bytes".into(), json!(ring.len));
    io.insert("capture_blocks".into(), json!(blocks_read));
    io.insert("capture_other_packets".into(), json!(foreign));
    io.insert("rcvbuf_bytes".into(), Value::Null);
    Ok(acct.report(&lim, start_clock_ns, stop_reason, cfg.per_flow, v6, io))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_packet(dst: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&[10, 0, 0, 1]);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn parses_ipv4_udp_to_our_ports_only() {
        let mut bind = [0u8; 16];
        bind[..4].copy_from_slice(&[10, 0, 0, 2]);
        let p = v4_packet([10, 0, 0, 2], 5301, &[1; 36]);
        let (key, payload, l3) = parse_l3(&p, &bind, false, false, 5301, 5302).unwrap();
        assert_eq!((key.sport, key.dport, l3, payload.len()), (40000, 5301, 64, 36));
        assert_eq!(&key.addr[..4], &[10, 0, 0, 1]);
        assert!(parse_l3(&p, &bind, false, false, 5302, 5303).is_none(), "port outside the range");
        let other = v4_packet([10, 0, 0, 3], 5301, &[1; 36]);
        assert!(parse_l3(&other, &bind, false, false, 5301, 5301).is_none(), "another destination");
        assert!(parse_l3(&other, &bind, true, false, 5301, 5301).is_some(), "any-address bind");
        let (key, _, _) = parse_l3(&other, &[0; 16], true, true, 5301, 5301).unwrap();
        assert_eq!(&key.addr[10..], &[0xff, 0xff, 10, 0, 0, 1], "v4-mapped for a :: receiver");
        // snapped capture: payload is what was kept, size is the IP total length
        let big = v4_packet([10, 0, 0, 2], 5301, &[0; 1472]);
        let (_, payload, l3) = parse_l3(&big[..120], &bind, false, false, 5301, 5301).unwrap();
        assert_eq!((payload.len(), l3), (92, 1500));
    }

    #[test]
    fn parses_ipv6_udp() {
        let bind: [u8; 16] = [0x20, 1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut p = vec![0x60, 0, 0, 0, 0, 20, 17, 64];
        p.extend_from_slice(&[0x20, 1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&bind);
        p.extend_from_slice(&[0x9c, 0x40, 0x14, 0xb5, 0, 20, 0, 0]);
        p.extend_from_slice(&[7; 12]);
        let (key, payload, l3) = parse_l3(&p, &bind, false, false, 5301, 5301).unwrap();
        assert_eq!((key.sport, key.dport, l3, payload.len()), (40000, 5301, 60, 12));
        p[6] = 43; // routing header: not ours
        assert!(parse_l3(&p, &bind, false, false, 5301, 5301).is_none());
    }

    #[test]
    fn filter_is_well_formed() {
        let f = socket_filter(5301, 5400);
        assert_eq!(f.len(), 16);
        // every jump lands inside the program
        for (i, ins) in f.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                let t = if ins.code == 0x05 { i + 1 + ins.k as usize } else { i + 1 + ins.jt.max(ins.jf) as usize };
                assert!(t < f.len(), "insn {i} jumps out");
            }
        }
    }
}
