//! The tbagg wire format (docs/agg.md): one outer UDP datagram carries an
//! 8-byte header and `count` inner IP packets, each behind a 2-byte length.
//!
//! ```text
//!  0               1               2               3
//! |ver=1 | flags=0 |    count      |          VNI (24 bits) ...
//! ... VNI          |   reserved    |        datagram sequence       |
//! | len (2) | inner packet | len (2) | inner packet | ...
//! ```
//!
//! Decoding is all-or-nothing: a datagram whose header, count or lengths do not
//! add up exactly is malformed and dropped whole, so a corrupt length can never
//! make the receiver deliver a slice of a neighbour as a packet.

pub const VERSION: u8 = 1;
pub const HEADER: usize = 8;
pub const SEPARATOR: usize = 2;
/// The most packets one datagram may carry (the count field is one byte).
pub const MAX_COUNT: usize = 255;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// shorter than the header
    Short,
    /// version nibble is not ours, or a flag or reserved bit we do not know is set
    Version,
    /// count 0
    Empty,
    /// a VNI other than this tunnel's
    Vni,
    /// a length of 0, or running past the end of the datagram
    Length,
    /// fewer or more bytes than the packets' lengths account for
    Trailing,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub vni: u32,
    pub seq: u16,
    pub packets: Vec<&'a [u8]>,
}

/// Parse one outer datagram for tunnel `vni`; Err names why it is dropped.
pub fn decode(buf: &[u8], vni: u32) -> Result<Datagram<'_>, Malformed> {
    if buf.len() < HEADER {
        return Err(Malformed::Short);
    }
    if buf[0] != VERSION << 4 || buf[5] != 0 {
        return Err(Malformed::Version);
    }
    let count = buf[1] as usize;
    if count == 0 {
        return Err(Malformed::Empty);
    }
    let got = u32::from_be_bytes([0, buf[2], buf[3], buf[4]]);
    if got != vni {
        return Err(Malformed::Vni);
    }
    let seq = u16::from_be_bytes([buf[6], buf[7]]);
    let mut packets = Vec::with_capacity(count);
    let mut at = HEADER;
    for _ in 0..count {
        if at + SEPARATOR > buf.len() {
            return Err(Malformed::Length);
        }
        let len = u16::from_be_bytes([buf[at], buf[at + 1]]) as usize;
        at += SEPARATOR;
        if len == 0 || at + len > buf.len() {
            return Err(Malformed::Length);
        }
        packets.push(&buf[at..at + len]);
        at += len;
    }
    if at != buf.len() {
        return Err(Malformed::Trailing);
    }
    Ok(Datagram { vni, seq, packets })
}

/// Builds one outer datagram in place: `start`, then `push` packets while `fits`.
pub struct Encoder {
    pub buf: Vec<u8>,
    pub count: usize,
    limit: usize,
}

impl Encoder {
    /// `limit`: the largest UDP payload the path takes (path MTU minus outer IP and UDP).
    pub fn new(limit: usize) -> Encoder {
        Encoder { buf: Vec::with_capacity(limit), count: 0, limit }
    }

    pub fn start(&mut self, vni: u32, seq: u16) {
        let v = vni.to_be_bytes();
        let s = seq.to_be_bytes();
        self.buf.clear();
        self.buf.extend_from_slice(&[VERSION << 4, 0, v[1], v[2], v[3], 0, s[0], s[1]]);
        self.count = 0;
    }

    /// Whether a packet of `len` bytes still fits (size budget and count field).
    pub fn fits(&self, len: usize) -> bool {
        self.count < MAX_COUNT && self.buf.len() + SEPARATOR + len <= self.limit
    }

    /// Append one packet (the caller checked `fits`; a packet alone always fits because the
    /// tunnel MTU is the path MTU minus outer headers, header and one separator).
    pub fn push(&mut self, pkt: &[u8]) {
        debug_assert!(!pkt.is_empty() && pkt.len() <= u16::MAX as usize);
        self.buf.extend_from_slice(&(pkt.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(pkt);
        self.count += 1;
        self.buf[1] = self.count as u8;
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(vni: u32, seq: u16, pkts: &[&[u8]], limit: usize) -> Vec<u8> {
        let mut e = Encoder::new(limit);
        e.start(vni, seq);
        for p in pkts {
            assert!(e.fits(p.len()));
            e.push(p);
        }
        e.buf.clone()
    }

    #[test]
    fn round_trip_keeps_order_vni_and_sequence() {
        let pkts: [&[u8]; 3] = [b"first packet", b"2", &[0xab; 300]];
        let buf = encode(0x00ab_cdef, 0xbeef, &pkts, 1472);
        assert_eq!(buf.len(), HEADER + 3 * SEPARATOR + 12 + 1 + 300);
        assert_eq!(&buf[..8], &[0x10, 3, 0xab, 0xcd, 0xef, 0, 0xbe, 0xef]);
        let d = decode(&buf, 0x00ab_cdef).unwrap();
        assert_eq!(d.seq, 0xbeef);
        assert_eq!(d.packets, pkts.to_vec());
    }

    #[test]
    fn size_budget_and_count_limit() {
        let mut e = Encoder::new(HEADER + 2 * (SEPARATOR + 100));
        e.start(1, 0);
        assert!(e.fits(100));
        e.push(&[1; 100]);
        assert!(e.fits(100));
        e.push(&[2; 100]);
        assert!(!e.fits(1), "full to the byte");
        let mut e = Encoder::new(65535);
        e.start(1, 0);
        for _ in 0..MAX_COUNT {
            e.push(&[7; 20]);
        }
        assert!(!e.fits(20), "the count field holds 255");
        assert_eq!(decode(&e.buf, 1).unwrap().packets.len(), MAX_COUNT);
    }

    #[test]
    fn each_malformation_is_named() {
        let good = encode(5, 1, &[b"abcd", b"ef"], 1472);
        assert_eq!(decode(&good[..7], 5), Err(Malformed::Short));
        let mut v = good.clone();
        v[0] = 0x20;
        assert_eq!(decode(&v, 5), Err(Malformed::Version));
        let mut v = good.clone();
        v[0] = 0x11; // unknown flag
        assert_eq!(decode(&v, 5), Err(Malformed::Version));
        let mut v = good.clone();
        v[5] = 1; // reserved byte
        assert_eq!(decode(&v, 5), Err(Malformed::Version));
        let mut v = good.clone();
        v[1] = 0;
        assert_eq!(decode(&v, 5), Err(Malformed::Empty));
        assert_eq!(decode(&good, 6), Err(Malformed::Vni));
        let mut v = good.clone();
        v[1] = 3; // claims a third packet
        assert_eq!(decode(&v, 5), Err(Malformed::Length));
        let mut v = good.clone();
        v[9] = 200; // first length runs past the end
        assert_eq!(decode(&v, 5), Err(Malformed::Length));
        let mut v = good.clone();
        v[8] = 0;
        v[9] = 0; // zero length
        assert_eq!(decode(&v, 5), Err(Malformed::Length));
        let mut v = good.clone();
        v.push(0); // a stray byte after the last packet
        assert_eq!(decode(&v, 5), Err(Malformed::Trailing));
        assert_eq!(decode(&good[..good.len() - 1], 5), Err(Malformed::Length));
    }

    /// xorshift64*: deterministic, so a failure reproduces from its iteration number.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Many random, truncated, bit-flipped and bad-length datagrams: decode never panics,
    /// never returns a packet outside the buffer, and every valid one is exactly a re-encoding.
    #[test]
    fn fuzz_random_truncated_and_bad_length_buffers() {
        let mut rng = Rng(0x7462_6167_0000_0001);
        let (mut ok, mut malformed) = (0u32, 0u32);
        for _ in 0..200_000 {
            let buf: Vec<u8> = match rng.below(4) {
                0 => (0..rng.below(1600)).map(|_| rng.next() as u8).collect(),
                _ => {
                    let n = 1 + rng.below(12);
                    let pkts: Vec<Vec<u8>> = (0..n)
                        .map(|_| (0..1 + rng.below(120)).map(|_| rng.next() as u8).collect())
                        .collect();
                    let refs: Vec<&[u8]> = pkts.iter().map(|p| p.as_slice()).collect();
                    let mut b = encode(42, rng.next() as u16, &refs, 65535);
                    match rng.below(4) {
                        0 => b.truncate(rng.below(b.len() + 1)),
                        1 => {
                            let i = rng.below(b.len());
                            b[i] ^= 1 << rng.below(8);
                        }
                        2 => {
                            let i = HEADER + rng.below(b.len() - HEADER);
                            b[i] = rng.next() as u8; // often a separator byte
                        }
                        _ => b.extend((0..rng.below(4)).map(|_| rng.next() as u8)),
                    }
                    b
                }
            };
            match decode(&buf, 42) {
                Ok(d) => {
                    ok += 1;
                    let total: usize = d.packets.iter().map(|p| SEPARATOR + p.len()).sum();
                    assert_eq!(HEADER + total, buf.len());
                    assert_eq!(encode(42, d.seq, &d.packets, 65535), buf);
                }
                Err(_) => malformed += 1,
            }
        }
        assert!(ok > 1000 && malformed > 100_000, "ok {ok} malformed {malformed}");
    }
}
