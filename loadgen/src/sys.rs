//! Thin wrappers over libc: clocks, sleeping, signals, socket options and
//! sockaddr conversion. Everything unsafe lives here or next to the
//! sendmmsg/recvmmsg calls.

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Which clock is written into / compared against the packet timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    Monotonic,
    Realtime,
}

impl Clock {
    pub fn id(self) -> libc::clockid_t {
        match self {
            Clock::Monotonic => libc::CLOCK_MONOTONIC,
            Clock::Realtime => libc::CLOCK_REALTIME,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Clock::Monotonic => "monotonic",
            Clock::Realtime => "realtime",
        }
    }
    pub fn code(self) -> u8 {
        match self {
            Clock::Monotonic => 0,
            Clock::Realtime => 1,
        }
    }
    pub fn parse(s: &str) -> Option<Clock> {
        match s {
            "monotonic" | "mono" => Some(Clock::Monotonic),
            "realtime" | "real" => Some(Clock::Realtime),
            _ => None,
        }
    }
}

/// Current time of `clock` in nanoseconds.
#[inline]
pub fn now_ns(clock: Clock) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; clock ids are valid constants.
    unsafe { libc::clock_gettime(clock.id(), &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic time in ns (used for pacing and all durations).
#[inline]
pub fn mono_ns() -> u64 {
    now_ns(Clock::Monotonic)
}

/// Sleep until the absolute CLOCK_MONOTONIC time `deadline_ns`. Returns early
/// (without error) when interrupted by a signal so the caller can check the
/// stop flag.
pub fn sleep_until_mono(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec; remaining-time pointer may be null with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut());
    }
}

/// Reduce the kernel timer slack of this thread to 1 ns (default is 50 us),
/// which makes clock_nanosleep wake-ups much more punctual.
pub fn set_min_timer_slack() {
    // SAFETY: plain prctl with integer args.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Install SIGINT/SIGTERM handlers that only set a flag. SA_RESTART is *not*
/// set, so blocking syscalls return EINTR and the loops notice the flag fast.
pub fn install_stop_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: zeroed sigaction is valid; handler is async-signal-safe
        // (atomic stores only).
        unsafe {
            let mut sa: libc::sigaction = mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

#[inline]
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

pub fn stop_signal_name() -> Option<&'static str> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => Some("signal"),
    }
}

pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub fn errno_name(e: i32) -> String {
    match e {
        libc::ENOBUFS => "ENOBUFS".into(),
        libc::EAGAIN => "EAGAIN".into(),
        libc::ECONNREFUSED => "ECONNREFUSED".into(),
        libc::EHOSTUNREACH => "EHOSTUNREACH".into(),
        libc::ENETUNREACH => "ENETUNREACH".into(),
        libc::EMSGSIZE => "EMSGSIZE".into(),
        libc::EPERM => "EPERM".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::ENOMEM => "ENOMEM".into(),
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL".into(),
        other => format!("errno{other}"),
    }
}

/// setsockopt(2) with any plain-data value (an int, a struct like tpacket_req3).
pub fn setsockopt<T>(fd: RawFd, level: i32, name: i32, val: &T) -> io::Result<()> {
    // SAFETY: pointer to a live T of the given size.
    let r = unsafe {
        libc::setsockopt(fd, level, name, val as *const T as *const libc::c_void, mem::size_of::<T>() as libc::socklen_t)
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, val: i32) -> io::Result<()> {
    setsockopt(fd, level, name, &val)
}

fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut val: i32 = 0;
    let mut len = mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: pointers to live locals.
    let r = unsafe { libc::getsockopt(fd, level, name, &mut val as *mut i32 as *mut libc::c_void, &mut len) };
    if r == 0 { Ok(val) } else { Err(io::Error::last_os_error()) }
}

/// Set a socket buffer size. Tries the privileged *FORCE variant first (works
/// as root regardless of net.core.[rw]mem_max), then the normal one.
/// Returns the size the kernel reports afterwards (which is doubled by Linux).
pub fn set_buf(fd: RawFd, recv: bool, bytes: i32) -> i32 {
    let (force, normal) = if recv {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, bytes).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, normal, bytes);
    }
    getsockopt_int(fd, libc::SOL_SOCKET, normal).unwrap_or(0)
}

/// Ask the kernel to attach the socket's cumulative drop counter
/// (SO_RXQ_OVFL) as ancillary data to received datagrams.
pub fn enable_rxq_ovfl(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1).is_ok()
}

/// Ask for kernel software receive timestamps (SCM_TIMESTAMPNS, CLOCK_REALTIME).
pub fn enable_rx_timestamps(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).is_ok()
}

/// Relative sleep (used by the receiver between empty polls).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
}

pub fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on an owned fd.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

/// Convert a std SocketAddr into a sockaddr_storage + length for msg_name.
pub fn to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: zeroed sockaddr_storage is valid; we write the matching struct.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            (ss, mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (ss, mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// Compact, hashable peer identity extracted from a received sockaddr:
/// 16 address bytes (IPv4 in the first 4) + port.
pub fn peer_from_sockaddr(ss: &libc::sockaddr_storage) -> Option<([u8; 16], u16)> {
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: family says this is a sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&sin.sin_addr.s_addr.to_ne_bytes());
            Some((a, u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: family says this is a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some((sin6.sin6_addr.s6_addr, u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

pub fn peer_to_string(addr: &[u8; 16], port: u16, v6: bool) -> String {
    let ip: IpAddr = if v6 {
        IpAddr::V6(Ipv6Addr::from(*addr))
    } else {
        IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
    };
    SocketAddr::new(ip, port).to_string()
}

/// Pin the calling thread to one CPU.
pub fn pin_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = mem::zeroed();
        if cpu >= 8 * mem::size_of::<libc::cpu_set_t>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// (user, system) CPU seconds consumed by this process so far.
pub fn cpu_times() -> (f64, f64) {
    // SAFETY: zeroed rusage is valid; getrusage fills it.
    unsafe {
        let mut ru: libc::rusage = mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (tv(ru.ru_utime), tv(ru.ru_stime))
    }
}
