//! The receiver: one thread reads recvmmsg batches from the remote site (with UDP GRO: runs
//! of datagrams per read), checks each datagram whole and writes its packets to the TUN in
//! order (with offload: in-order TCP segments of a flow coalesced into one super-packet).

use std::os::fd::RawFd;
use std::sync::atomic::Ordering::Relaxed;

use crate::{BATCH, Counters, Offloads, SOL_UDP, offload, wire};

const RX_BUF: usize = 65536;
pub const UDP_GRO: libc::c_int = 104;

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
pub fn rx_loop(udp: RawFd, tun: RawFd, vni: u32, c: &Counters, o: &Offloads) {
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
