//! Opening a TUN device (one fd per queue) and the few libc calls the datapath makes.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Open `queues` fds on the TUN device `name` (created if absent, gone when the last closes).
/// IFF_NO_PI: each read is one bare IP packet; IFF_MULTI_QUEUE when queues > 1, so the kernel
/// spreads flows over the queues by hash (one flow stays on one queue: no reordering).
/// `vnet`: IFF_VNET_HDR, every read and write starts with a virtio_net_hdr (offload.rs), and
/// the device takes checksum and TCP segmentation offload (TUNSETOFFLOAD CSUM|TSO4|TSO6), so
/// the kernel hands over TCP super-packets of up to 64 kB and CHECKSUM_PARTIAL packets.
pub fn open(name: &str, queues: usize, vnet: bool) -> io::Result<Vec<RawFd>> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "device name must be 1..15 bytes"));
    }
    let path = CString::new("/dev/net/tun").unwrap();
    let mut fds = Vec::with_capacity(queues);
    for _ in 0..queues {
        // SAFETY: a valid NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: IFF_TUN | IFF_NO_PI, _pad: [0; 22] };
        if queues > 1 {
            req.flags |= IFF_MULTI_QUEUE;
        }
        if vnet {
            req.flags |= IFF_VNET_HDR;
        }
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes one ifreq, which `req` is laid out as.
        if unsafe { libc::ioctl(fd, TUNSETIFF, &mut req as *mut IfReq) } < 0 {
            let e = io::Error::last_os_error();
            unsafe { libc::close(fd) };
            return Err(e);
        }
        fds.push(fd);
        if vnet {
            let size = crate::offload::VNET_HDR as libc::c_int;
            let offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
            // SAFETY: TUNSETVNETHDRSZ reads one int; TUNSETOFFLOAD takes the flags by value.
            if unsafe { libc::ioctl(fd, TUNSETVNETHDRSZ, &size as *const libc::c_int) } < 0
                || unsafe { libc::ioctl(fd, TUNSETOFFLOAD, offloads as libc::c_ulong) } < 0
            {
                let e = io::Error::last_os_error();
                for fd in fds {
                    unsafe { libc::close(fd) };
                }
                return Err(e);
            }
        }
    }
    Ok(fds)
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Wait until `fd` is readable or `timeout_ns` passes (None: no limit). ppoll, not poll:
/// the flush timeout is in microseconds, poll's is in milliseconds.
pub fn wait_readable(fd: RawFd, timeout_ns: Option<u64>) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one pollfd, an optional timespec, no signal mask change.
    unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Timers of this thread may fire up to 1 ns late instead of the default 50 µs (the slack would
/// otherwise double a 50 µs flush timeout).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}
