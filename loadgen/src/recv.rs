//! Receiver: K sockets, recvmmsg batches, per-flow accounting, END handling.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use serde_json::{Map, Value, json};

use crate::CliError;
use crate::acct::{self, Acct, FlowKey, Limits};
use crate::send::l3_overhead;
use crate::sys::{self, Clock};

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
    /// count at the site's devices from an AF_PACKET ring instead of sockets
    pub capture: bool,
    pub ring_mb: u32,
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
    if cfg.capture {
        return crate::capture::run(cfg);
    }
    let (socks, rcvbuf_actual, ovfl_ok, kts_ok) = bind_ports(cfg, cfg.rcvbuf)?;
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

    let mut acct = Acct::new(cfg.clock, cfg.drain_ms * 1_000_000);
    let mut drops_per_sock = vec![0u64; socks.len()];
    let lim = Limits::new(cfg.timeout_idle_s, cfg.max_seconds);
    let start_clock_ns = sys::now_ns(cfg.clock);
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
                let real_minus_c = acct::real_minus(cfg.clock, now_c);
                acct.last_activity_mono = now_m;
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
                                    if let Some(v) = acct::kernel_ts(real, real_minus_c, now_c) {
                                        rx_c = v;
                                        acct.kts_used += 1;
                                    }
                                }
                                c = libc::CMSG_NXTHDR(h, c);
                            }
                        }
                    }
                    if h.msg_flags & libc::MSG_TRUNC != 0 {
                        acct.truncated += 1;
                        continue;
                    }
                    let Some((addr, sport)) = sys::peer_from_sockaddr(&names[i]) else {
                        acct.malformed += 1;
                        continue;
                    };
                    // a dual-stack (::) socket sees IPv4 senders as ::ffff:a.b.c.d
                    let v4mapped = v6 && addr[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
                    let size = len as u64 + if v4mapped { 28 } else { ovh };
                    let key = FlowKey { addr, sport, dport };
                    acct.packet(key, &bufs[i * SLOT..i * SLOT + len], size, rx_c, now_m, now_c);
                }
                if (r as usize) < batch {
                    break;
                }
            }
        }
        let now = sys::mono_ns();
        if let Some(r) = acct.stop_reason(now, &lim) {
            stop_reason = r;
            break;
        }
        // Busy-poll while traffic is flowing: a receiver sleeping in poll()
        // must be woken per packet batch, and on loopback/veth that wake-up
        // cost lands on the *sender's* CPU and throttles it. After `spin_ns`
        // without data we fall back to a blocking poll().
        let since = now.saturating_sub(acct.last_activity_mono);
        if !got_any && since >= spin_ns && acct.started() && since < 1_000_000_000 && sleep_ns > 0 {
            // traffic is flowing but the queue is empty: nap instead of
            // poll(), so the sender never pays for waking us up; latency is
            // unaffected because it uses kernel arrival timestamps
            sys::sleep_ns(sleep_ns);
        } else if !got_any && since >= spin_ns {
            // wait for data, but wake up for deadlines and signals (<= 50 ms)
            let wait_ns = acct.wait_budget_ns(now, &lim);
            let ms = wait_ns.div_ceil(1_000_000) as i32;
            // SAFETY: pfds is a live array of pollfd.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        }
    }
    let mut io = Map::new();
    io.insert("bind".into(), json!(cfg.bind.to_string()));
    io.insert("port".into(), json!(cfg.port));
    io.insert("ports_count".into(), json!(k));
    io.insert("capture".into(), json!(false));
    io.insert("socket_drops".into(), if ovfl_ok { json!(drops_per_sock.iter().sum::<u64>()) } else { Value::Null });
    io.insert("rcvbuf_bytes".into(), json!(rcvbuf_actual));
    Ok(acct.report(&lim, start_clock_ns, stop_reason, cfg.per_flow, v6, io))
}

/// Bind UDP ports port..port+K-1 on the bind address, non-blocking, with
/// `rcvbuf`; returns the sockets, the buffer size obtained and whether
/// SO_RXQ_OVFL and kernel timestamps could be enabled on all of them.
pub fn bind_ports(cfg: &RecvCfg, rcvbuf: i32) -> Result<(Vec<UdpSocket>, i32, bool, bool), CliError> {
    let k = cfg.ports_count.max(1);
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
        rcvbuf_actual = sys::set_buf(fd, true, rcvbuf);
        ovfl_ok &= sys::enable_rxq_ovfl(fd);
        kts_ok &= sys::enable_rx_timestamps(fd);
        socks.push(s);
    }
    Ok((socks, rcvbuf_actual, ovfl_ok, kts_ok))
}
