//! Segmentation and coalescing on real packet bytes, against a textbook checksum.

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
