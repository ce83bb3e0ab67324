//! TUN offloads (docs/agg.md "Offloads"): the virtio_net_hdr in front of every packet on a TUN
//! opened with IFF_VNET_HDR, TCP segmentation of the super-packets the kernel hands us (TSO in
//! userspace), finishing CHECKSUM_PARTIAL checksums, and coalescing in-order TCP segments of one
//! flow back into one super-packet on the way out (GRO in userspace).
//!
//! The rules follow the kernel's tcp_gso_segment / tcp_gro_receive and wireguard-go's
//! tun/tcp_offload_linux.go: a segment gets its own IPv4 id (+1 each), length, sequence number
//! and full checksums; CWR only on the first, FIN and PSH only on the last. Only pure ACK or
//! ACK|PSH data segments coalesce, only with the flow's next expected sequence number, with
//! identical IP fields (but id/length/checksum), ack, window and TCP options, never after a
//! segment with PSH or one shorter than the first, and only when their TCP checksum verifies
//! (the coalesced packet goes to the kernel as CHECKSUM_PARTIAL: a corrupt segment would
//! otherwise be delivered as good).

/// Size of `struct virtio_net_hdr` (no num_buffers): what TUNSETVNETHDRSZ sets.
pub const VNET_HDR: usize = 10;
pub const F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_ECN: u8 = 0x80;

/// The largest IP packet a super-packet may grow to (IPv4 total length, IPv6 payload length).
const MAX_IP: usize = 65535;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const TCP_CWR: u8 = 0x80;

/// `struct virtio_net_hdr`, fields in host byte order (TUN without TUNSETVNETLE: native).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8]) -> VnetHdr {
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        }
    }

    pub fn bytes(&self) -> [u8; VNET_HDR] {
        let mut b = [0u8; VNET_HDR];
        b[0] = self.flags;
        b[1] = self.gso_type;
        for (i, v) in [(2, self.hdr_len), (4, self.gso_size), (6, self.csum_start), (8, self.csum_offset)] {
            b[i..i + 2].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }
}

/// One's-complement sum of `data` (big-endian 16-bit words, an odd last byte padded) added to
/// `acc`, unfolded: 32-bit words at a time (2^16 = 1 mod 0xffff, so a 32-bit word adds as its
/// two halves).
pub fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u16::from_be_bytes([p[0], p[1]]) as u64;
    }
    if let [b] = pairs.remainder() {
        acc += (*b as u64) << 8;
    }
    acc
}

pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The TCP/UDP pseudo-header's sum for an IP packet `ip` (v4 or v6) and an L4 length.
fn pseudo(ip: &[u8], proto: u8, l4_len: usize) -> u64 {
    let addrs = if ip[0] >> 4 == 4 { &ip[12..20] } else { &ip[8..40] };
    sum(addrs, proto as u64 + l4_len as u64)
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn ipv4_header_checksum(ip: &mut [u8], ihl: usize) {
    put16(ip, 10, 0);
    let c = !fold(sum(&ip[..ihl], 0));
    put16(ip, 10, c);
}

/// Finish a CHECKSUM_PARTIAL packet: the kernel left the pseudo-header sum in the checksum
/// field at csum_start + csum_offset; the checksum is the complement of everything from
/// csum_start on. Err when the offsets do not fit the packet.
pub fn finish_checksum(pkt: &mut [u8], h: &VnetHdr) -> Result<(), &'static str> {
    let start = h.csum_start as usize;
    let at = start + h.csum_offset as usize;
    if at + 2 > pkt.len() {
        return Err("csum_start/csum_offset beyond the packet");
    }
    let mut c = !fold(sum(&pkt[start..], 0));
    if c == 0 && h.csum_offset == 6 {
        c = 0xffff; // UDP: 0 means "no checksum"
    }
    put16(pkt, at, c);
    Ok(())
}

/// Where the IP and TCP headers of a TCP packet end: (ip header length, tcp header length).
/// `l4`: where the kernel says TCP starts (csum_start), which for IPv6 covers extension
/// headers; None: from the IP header alone (IPv6 without extension headers).
fn tcp_offsets(pkt: &[u8], l4: Option<usize>) -> Option<(usize, usize)> {
    let (iphl, proto) = match (pkt.first()? >> 4, l4) {
        (4, _) if pkt.len() >= 20 => ((pkt[0] & 0xf) as usize * 4, pkt[9]),
        (6, None) if pkt.len() >= 40 => (40, pkt[6]),
        (6, Some(l4)) if l4 >= 40 => (l4, if l4 == 40 { pkt[6] } else { 6 }),
        _ => return None,
    };
    if l4.is_some_and(|l4| l4 != iphl) || proto != 6 || iphl < 20 || pkt.len() < iphl + 20 {
        return None;
    }
    let thl = (pkt[iphl + 12] >> 4) as usize * 4;
    if thl < 20 || pkt.len() < iphl + thl {
        return None;
    }
    Some((iphl, thl))
}

/// Split the TCP super-packet `pkt` (described by `h`, GSO_TCPV4/6) into segments of at most
/// `h.gso_size` payload bytes, each a complete packet with its own checksums; they are
/// appended to `out` back to back, their lengths to `lens`. Err (nothing appended) when the
/// packet and its header do not agree.
pub fn segment(pkt: &[u8], h: &VnetHdr, out: &mut Vec<u8>, lens: &mut Vec<usize>) -> Result<(), &'static str> {
    let l4 = (h.flags & F_NEEDS_CSUM != 0).then_some(h.csum_start as usize);
    let (iphl, thl) = tcp_offsets(pkt, l4).ok_or("GSO packet is not TCP over IPv4/IPv6")?;
    let v4 = pkt[0] >> 4 == 4;
    if v4 != (h.gso_type & !GSO_ECN == GSO_TCPV4) {
        return Err("gso_type does not match the IP version");
    }
    let mss = h.gso_size as usize;
    if mss == 0 {
        return Err("gso_size 0");
    }
    let hl = iphl + thl;
    let payload = &pkt[hl..];
    let segs = payload.len().div_ceil(mss).max(1);
    let id0 = get16(pkt, 4);
    let seq0 = get32(pkt, iphl + 4);
    let flags0 = pkt[iphl + 13];
    for (i, chunk) in payload.chunks(mss).enumerate() {
        let at = out.len();
        out.extend_from_slice(&pkt[..hl]);
        out.extend_from_slice(chunk);
        let s = &mut out[at..];
        let len = s.len();
        if v4 {
            put16(s, 2, len as u16);
            put16(s, 4, id0.wrapping_add(i as u16));
            ipv4_header_checksum(s, iphl);
        } else {
            put16(s, 4, (len - 40) as u16);
        }
        s[iphl + 4..iphl + 8].copy_from_slice(&seq0.wrapping_add((i * mss) as u32).to_be_bytes());
        let mut f = flags0;
        if i + 1 < segs {
            f &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            f &= !TCP_CWR;
        }
        s[iphl + 13] = f;
        put16(s, iphl + 16, 0);
        let c = !fold(sum(&s[iphl..], pseudo(s, 6, len - iphl)));
        put16(s, iphl + 16, c);
        lens.push(len);
    }
    Ok(())
}

/// The flow a coalesced super-packet is being built for.
struct Flow {
    iphl: usize,
    thl: usize,
    mss: usize,
    segs: usize,
    next_seq: u32,
    /// the last segment had PSH, or was shorter than mss: nothing may follow it
    closed: bool,
}

/// In-order TCP coalescing over one receive batch: `offer` each packet in order, `flush` at the
/// end of the batch. Packets reach `emit` (a vnet header and a packet) in the order offered.
#[derive(Default)]
pub struct Gro {
    buf: Vec<u8>,
    flow: Option<Flow>,
    /// super-packets written (two or more segments) and the segments they held
    pub coalesced: u64,
    pub coalesced_segments: u64,
}

/// (ip header length, tcp header length, payload length) of a packet that may be coalesced:
/// TCP in IPv4 without options or fragmentation, or IPv6 without extension headers; ACK or
/// ACK|PSH only; some payload; lengths consistent; TCP checksum correct.
fn candidate(p: &[u8]) -> Option<(usize, usize, usize)> {
    let (iphl, thl) = tcp_offsets(p, None)?;
    if p[0] >> 4 == 4 {
        if iphl != 20 || get16(p, 2) as usize != p.len() || get16(p, 6) & 0x3fff != 0 {
            return None;
        }
    } else if get16(p, 4) as usize + 40 != p.len() {
        return None;
    }
    let f = p[iphl + 13];
    if f != TCP_ACK && f != TCP_ACK | TCP_PSH {
        return None;
    }
    let plen = p.len() - iphl - thl;
    if plen == 0 || fold(sum(&p[iphl..], pseudo(p, 6, p.len() - iphl))) != 0xffff {
        return None;
    }
    Some((iphl, thl, plen))
}

impl Gro {
    pub fn offer(&mut self, p: &[u8], emit: &mut dyn FnMut(&[u8; VNET_HDR], &[u8])) {
        let Some((iphl, thl, plen)) = candidate(p) else {
            self.flush(emit);
            emit(&[0; VNET_HDR], p);
            return;
        };
        if let Some(f) = &mut self.flow {
            let h = &self.buf;
            let same_ip = if iphl == 20 {
                h[0..2] == p[0..2] && h[6..10] == p[6..10] && h[12..20] == p[12..20]
            } else {
                h[0..4] == p[0..4] && h[6..40] == p[6..40]
            };
            let fits = h.len() + plen <= MAX_IP;
            if !f.closed
                && f.iphl == iphl
                && f.thl == thl
                && same_ip
                && fits
                && plen <= f.mss
                && h[iphl..iphl + 4] == p[iphl..iphl + 4]
                && get32(p, iphl + 4) == f.next_seq
                && h[iphl + 8..iphl + 13] == p[iphl + 8..iphl + 13]
                && h[iphl + 14..iphl + 16] == p[iphl + 14..iphl + 16]
                && h[iphl + 18..iphl + thl] == p[iphl + 18..iphl + thl]
            {
                self.buf.extend_from_slice(&p[iphl + thl..]);
                let psh = p[iphl + 13] & TCP_PSH;
                self.buf[iphl + 13] |= psh;
                f.segs += 1;
                f.next_seq = f.next_seq.wrapping_add(plen as u32);
                f.closed = psh != 0 || plen < f.mss;
                return;
            }
            self.flush(emit);
        }
        self.buf.clear();
        self.buf.extend_from_slice(p);
        self.flow = Some(Flow {
            iphl,
            thl,
            mss: plen,
            segs: 1,
            next_seq: get32(p, iphl + 4).wrapping_add(plen as u32),
            closed: p[iphl + 13] & TCP_PSH != 0,
        });
    }

    /// Write out the super-packet being built, if any: a lone segment unchanged with an empty
    /// header; several as one GSO packet (CHECKSUM_PARTIAL: the TCP checksum field holds the
    /// pseudo-header sum, the kernel or the next hop finishes it).
    pub fn flush(&mut self, emit: &mut dyn FnMut(&[u8; VNET_HDR], &[u8])) {
        let Some(f) = self.flow.take() else { return };
        let b = &mut self.buf;
        if f.segs == 1 {
            emit(&[0; VNET_HDR], b);
            return;
        }
        let len = b.len();
        let v4 = f.iphl == 20;
        if v4 {
            put16(b, 2, len as u16);
            ipv4_header_checksum(b, 20);
        } else {
            put16(b, 4, (len - 40) as u16);
        }
        let ps = fold(pseudo(b, 6, len - f.iphl));
        put16(b, f.iphl + 16, ps);
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if v4 { GSO_TCPV4 } else { GSO_TCPV6 },
            hdr_len: (f.iphl + f.thl) as u16,
            gso_size: f.mss as u16,
            csum_start: f.iphl as u16,
            csum_offset: 16,
        };
        self.coalesced += 1;
        self.coalesced_segments += f.segs as u64;
        emit(&h.bytes(), b);
    }
}

#[cfg(test)]
mod tests;
