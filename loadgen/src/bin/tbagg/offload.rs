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
mod tests {
    use super::*;

    /// The textbook one's-complement checksum, 16 bits at a time: the reference.
    fn ref_csum(parts: &[&[u8]]) -> u16 {
        let mut all = Vec::new();
        for p in parts {
            all.extend_from_slice(p);
        }
        if all.len() % 2 == 1 {
            all.push(0);
        }
        let mut s: u32 = 0;
        for w in all.chunks(2) {
            s += ((w[0] as u32) << 8) | w[1] as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    fn ref_tcp_ok(p: &[u8]) -> bool {
        let v4 = p[0] >> 4 == 4;
        let iphl = if v4 { (p[0] & 0xf) as usize * 4 } else { 40 };
        let l4 = (p.len() - iphl) as u32;
        let mut ph = Vec::new();
        if v4 {
            ph.extend_from_slice(&p[12..20]);
            ph.extend_from_slice(&[0, 6]);
            ph.extend_from_slice(&(l4 as u16).to_be_bytes());
        } else {
            ph.extend_from_slice(&p[8..40]);
            ph.extend_from_slice(&l4.to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 6]);
        }
        ref_csum(&[&ph, &p[iphl..]]) == 0
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A TCP super-packet as the kernel hands it over a TUN with TSO: headers of the first
    /// segment, all payload, TCP checksum field = pseudo-header sum (CHECKSUM_PARTIAL).
    fn super_packet(v4: bool, opts: usize, payload: &[u8], flags: u8, seq: u32) -> Vec<u8> {
        let iphl = if v4 { 20 } else { 40 };
        let thl = 20 + opts;
        let len = iphl + thl + payload.len();
        let mut p = vec![0u8; iphl + thl];
        if v4 {
            p[0] = 0x45;
            p[1] = 0x02;
            put16(&mut p, 2, len.min(65535) as u16);
            put16(&mut p, 4, 0xfff0);
            p[6] = 0x40; // DF
            p[8] = 64;
            p[9] = 6;
            p[12..16].copy_from_slice(&[10, 0, 0, 1]);
            p[16..20].copy_from_slice(&[10, 0, 0, 2]);
            ipv4_header_checksum(&mut p, 20);
        } else {
            p[0] = 0x60;
            p[1] = 0x01;
            p[3] = 0x42;
            put16(&mut p, 4, (len - 40) as u16);
            p[6] = 6;
            p[7] = 64;
            p[8] = 0xfd;
            p[23] = 1;
            p[24] = 0xfd;
            p[39] = 2;
        }
        put16(&mut p, iphl, 40000);
        put16(&mut p, iphl + 2, 5201);
        p[iphl + 4..iphl + 8].copy_from_slice(&seq.to_be_bytes());
        p[iphl + 8..iphl + 12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        p[iphl + 12] = ((thl / 4) as u8) << 4;
        p[iphl + 13] = flags;
        put16(&mut p, iphl + 14, 501);
        for (i, b) in p[iphl + 20..iphl + thl].iter_mut().enumerate() {
            *b = if i < 2 { 1 } else { i as u8 }; // NOPs then arbitrary option bytes
        }
        p.extend_from_slice(payload);
        let ps = fold(pseudo(&p, 6, len - iphl));
        put16(&mut p, iphl + 16, ps);
        p
    }

    fn gso_hdr(v4: bool, p: &[u8], mss: usize) -> VnetHdr {
        let iphl = if v4 { 20 } else { 40 };
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if v4 { GSO_TCPV4 } else { GSO_TCPV6 },
            hdr_len: (iphl + (p[iphl + 12] >> 4) as usize * 4) as u16,
            gso_size: mss as u16,
            csum_start: iphl as u16,
            csum_offset: 16,
        }
    }

    fn split(out: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
        let mut at = 0;
        lens.iter()
            .map(|&l| {
                at += l;
                out[at - l..at].to_vec()
            })
            .collect()
    }

    #[test]
    fn vnet_header_round_trips() {
        let h = VnetHdr {
            flags: 1,
            gso_type: 4,
            hdr_len: 72,
            gso_size: 1400,
            csum_start: 40,
            csum_offset: 16,
        };
        assert_eq!(VnetHdr::parse(&h.bytes()), h);
    }

    #[test]
    fn sum_matches_the_reference_on_odd_lengths() {
        let mut r = Rng(7);
        for len in 0..300 {
            let d: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            assert_eq!(!fold(sum(&d, 0)), ref_csum(&[&d]), "len {len}");
        }
    }

    #[test]
    fn partial_checksum_is_finished_like_the_reference() {
        let payload: Vec<u8> = (0..333u32).map(|i| (i * 7) as u8).collect();
        for v4 in [true, false] {
            let mut p = super_packet(v4, 12, &payload, TCP_ACK | TCP_PSH, 99);
            let mut h = gso_hdr(v4, &p, 1400);
            h.gso_type = GSO_NONE;
            finish_checksum(&mut p, &h).unwrap();
            assert!(ref_tcp_ok(&p));
        }
        let mut short = vec![0u8; 30];
        let h = VnetHdr {
            csum_start: 20,
            csum_offset: 16,
            flags: F_NEEDS_CSUM,
            ..Default::default()
        };
        assert!(finish_checksum(&mut short, &h).is_err());
    }

    #[test]
    fn segments_carry_ids_lengths_sequence_flags_and_checksums() {
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        for v4 in [true, false] {
            let p = super_packet(v4, 12, &payload, TCP_ACK | TCP_PSH | TCP_FIN | TCP_CWR, 0xffff_f000);
            let (mut out, mut lens) = (Vec::new(), Vec::new());
            segment(&p, &gso_hdr(v4, &p, 1388), &mut out, &mut lens).unwrap();
            let segs = split(&out, &lens);
            assert_eq!(segs.len(), 8); // 7 x 1388 + 284
            let iphl = if v4 { 20 } else { 40 };
            for (i, s) in segs.iter().enumerate() {
                if v4 {
                    assert_eq!(ref_csum(&[&s[..20]]), 0, "IPv4 header checksum");
                    assert_eq!(get16(s, 2) as usize, s.len());
                    assert_eq!(get16(s, 4), 0xfff0u16.wrapping_add(i as u16), "IPv4 id");
                } else {
                    assert_eq!(get16(s, 4) as usize, s.len() - 40);
                }
                assert!(ref_tcp_ok(s), "TCP checksum of segment {i}");
                assert_eq!(get32(s, iphl + 4), 0xffff_f000u32.wrapping_add(i as u32 * 1388));
                let f = s[iphl + 13];
                let last = i == segs.len() - 1;
                assert_eq!(f & (TCP_FIN | TCP_PSH) != 0, last, "FIN/PSH on the last only");
                assert_eq!(f & TCP_CWR != 0, i == 0, "CWR on the first only");
                assert_eq!(f & TCP_ACK, TCP_ACK);
                assert_eq!(&s[iphl + 32..], &payload[i * 1388..((i + 1) * 1388).min(payload.len())]);
            }
        }
    }

    #[test]
    fn ipv6_extension_headers_are_skipped_by_csum_start() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i % 241) as u8).collect();
        let mut p = super_packet(false, 12, &payload, TCP_ACK | TCP_PSH, 77);
        // a hop-by-hop header (8 bytes: next header TCP, PadN) between IPv6 and TCP
        p.splice(40..40, [6, 0, 1, 4, 0, 0, 0, 0]);
        p[6] = 0;
        let plen = get16(&p, 4) + 8;
        put16(&mut p, 4, plen);
        let mut h = gso_hdr(false, &p, 1000);
        h.csum_start = 48;
        h.hdr_len = 48 + 32;
        let (mut out, mut lens) = (Vec::new(), Vec::new());
        segment(&p, &h, &mut out, &mut lens).unwrap();
        let segs = split(&out, &lens);
        assert_eq!(segs.len(), 5);
        for (i, s) in segs.iter().enumerate() {
            assert_eq!(get16(s, 4) as usize, s.len() - 40);
            assert_eq!(&s[40..48], &[6, 0, 1, 4, 0, 0, 0, 0]);
            let mut ph = s[8..40].to_vec();
            ph.extend_from_slice(&((s.len() - 48) as u32).to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 6]);
            assert_eq!(ref_csum(&[&ph, &s[48..]]), 0, "segment {i}");
            assert_eq!(get32(s, 48 + 4), 77 + i as u32 * 1000);
            assert_eq!(&s[80..], &payload[i * 1000..(i + 1) * 1000]);
        }
        // without csum_start the extension header is not TCP: refused, nothing appended
        h.flags = 0;
        out.clear();
        lens.clear();
        assert!(segment(&p, &h, &mut out, &mut lens).is_err() && out.is_empty());
    }

    #[test]
    fn bad_gso_packets_are_refused() {
        let p = super_packet(true, 0, &[1; 3000], TCP_ACK, 1);
        let (mut out, mut lens) = (Vec::new(), Vec::new());
        assert!(segment(&p, &gso_hdr(true, &p, 0), &mut out, &mut lens).is_err());
        assert!(segment(&p, &gso_hdr(false, &p, 1000), &mut out, &mut lens).is_err());
        assert!(segment(&p[..30], &gso_hdr(true, &p, 1000), &mut out, &mut lens).is_err());
        let mut udp = p.clone();
        udp[9] = 17;
        assert!(segment(&udp, &gso_hdr(true, &p, 1000), &mut out, &mut lens).is_err());
        assert!(out.is_empty() && lens.is_empty());
    }

    fn coalesce(pkts: &[Vec<u8>]) -> Vec<(VnetHdr, Vec<u8>)> {
        let mut g = Gro::default();
        let mut got = Vec::new();
        let mut emit = |h: &[u8; VNET_HDR], p: &[u8]| got.push((VnetHdr::parse(h), p.to_vec()));
        for p in pkts {
            g.offer(p, &mut emit);
        }
        g.flush(&mut emit);
        got
    }

    /// What the kernel does with a GSO packet we write: segment it, finishing the checksum.
    fn kernel_view(h: &VnetHdr, p: &[u8]) -> Vec<Vec<u8>> {
        if h.gso_type == GSO_NONE {
            return vec![p.to_vec()];
        }
        let mut full = p.to_vec();
        finish_checksum(&mut full, h).unwrap();
        assert!(ref_tcp_ok(&full), "coalesced packet's checksum, once finished");
        let (mut out, mut lens) = (Vec::new(), Vec::new());
        segment(p, h, &mut out, &mut lens).unwrap();
        split(&out, &lens)
    }

    #[test]
    fn segment_then_coalesce_gives_back_the_super_packet() {
        let payload: Vec<u8> = (0..60_000u32).map(|i| (i * 13 % 256) as u8).collect();
        for v4 in [true, false] {
            let p = super_packet(v4, 12, &payload, TCP_ACK | TCP_PSH, 5);
            let h = gso_hdr(v4, &p, 1400);
            let (mut out, mut lens) = (Vec::new(), Vec::new());
            segment(&p, &h, &mut out, &mut lens).unwrap();
            let got = coalesce(&split(&out, &lens));
            assert_eq!(got.len(), 1);
            let (gh, gp) = &got[0];
            assert_eq!(
                (gh.gso_size, gh.gso_type, gh.csum_start, gh.csum_offset),
                (1400, h.gso_type, h.csum_start, 16)
            );
            assert_eq!(gh.hdr_len, h.hdr_len);
            let iphl = h.csum_start as usize;
            // the same packet but the IPv4 id (the first segment's, as the kernel's GRO keeps)
            assert_eq!(gp.len(), p.len());
            assert_eq!(gp[iphl..], p[iphl..]);
            if v4 {
                assert_eq!(ref_csum(&[&gp[..20]]), 0);
            }
        }
    }

    #[test]
    fn coalescing_stops_at_gaps_flows_flags_bad_checksums_and_short_segments() {
        let seg = |seq: u32, n: usize, flags: u8| super_packet(true, 0, &vec![seq as u8; n], flags, seq);
        let finish = |mut p: Vec<u8>| {
            finish_checksum(
                &mut p,
                &VnetHdr {
                    csum_start: 20,
                    csum_offset: 16,
                    ..Default::default()
                },
            )
            .unwrap();
            p
        };
        let a = finish(seg(0, 100, TCP_ACK));
        let b = finish(seg(100, 100, TCP_ACK));
        let gap = finish(seg(300, 100, TCP_ACK));
        let syn = finish(seg(400, 100, TCP_ACK | 0x02));
        let mut bad = finish(seg(500, 100, TCP_ACK));
        bad[60] ^= 1;
        let c = finish(seg(600, 100, TCP_ACK | TCP_PSH));
        let d = finish(seg(700, 100, TCP_ACK));
        let short = finish(seg(800, 50, TCP_ACK));
        let e = finish(seg(850, 50, TCP_ACK));
        let mut other = finish(seg(900, 100, TCP_ACK));
        other[23] = 9; // another source port
        let other = {
            let mut o = other;
            let h = VnetHdr {
                csum_start: 20,
                csum_offset: 16,
                ..Default::default()
            };
            let ps = fold(pseudo(&o, 6, o.len() - 20));
            put16(&mut o, 36, ps);
            finish_checksum(&mut o, &h).unwrap();
            o
        };
        let input = vec![a, b, gap, syn, bad, c.clone(), d, short, e, other];
        let got = coalesce(&input);
        let segs: Vec<usize> = got.iter().flat_map(|(h, p)| kernel_view(h, p)).map(|s| s.len()).collect();
        assert_eq!(segs.len(), input.len(), "every packet delivered once");
        let counts: Vec<usize> = got.iter().map(|(h, p)| kernel_view(h, p).len()).collect();
        assert_eq!(counts, vec![2, 1, 1, 1, 1, 2, 1, 1]);
        // the bad packet went through untouched (the kernel drops it, not us)
        assert_eq!(got[3].1, input[4]);
        assert_eq!(got[4].1, c);
    }

    #[test]
    fn fuzz_segment_then_coalesce_returns_the_payload() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..300 {
            let v4 = r.below(2) == 0;
            let opts = [0, 12, 20][r.below(3)];
            let mss = 1 + r.below(1500);
            let n = 1 + r.below(63_000);
            let payload: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            let flags = TCP_ACK | [0, TCP_PSH, TCP_FIN, TCP_CWR][r.below(4)];
            let seq = r.next() as u32;
            let p = super_packet(v4, opts, &payload, flags, seq);
            let h = gso_hdr(v4, &p, mss);
            let (mut out, mut lens) = (Vec::new(), Vec::new());
            segment(&p, &h, &mut out, &mut lens).unwrap();
            assert_eq!(lens.len(), n.div_ceil(mss));
            let segs = split(&out, &lens);
            for s in &segs {
                assert!(ref_tcp_ok(s), "round {round}");
            }
            let got = coalesce(&segs);
            let iphl = if v4 { 20 } else { 40 };
            let hl = iphl + 20 + opts;
            let mut back = Vec::new();
            let mut next = seq;
            for (gh, gp) in &got {
                for s in kernel_view(gh, gp) {
                    assert!(ref_tcp_ok(&s), "round {round}");
                    assert_eq!(get32(&s, iphl + 4), next, "round {round}: in order");
                    next = next.wrapping_add((s.len() - hl) as u32);
                    back.extend_from_slice(&s[hl..]);
                }
            }
            assert_eq!(back, payload, "round {round}");
            // a CWR (first) or FIN (last) segment is never merged; the rest make one
            let want = if flags & (TCP_FIN | TCP_CWR) != 0 && lens.len() > 1 { 2 } else { 1 };
            assert_eq!(got.len(), want, "round {round} mss {mss} n {n}");
        }
    }
}
