//! On-the-wire format of the UDP payload.
//!
//! Data packet (every packet starts with this 12-byte header, big endian):
//!   0..4   seq     u32  flow-local sequence number, 0,1,2,... (never 0xFFFFFFFF)
//!   4..12  ts_ns   u64  send time in ns of the chosen clock (monotonic/realtime)
//!   12..   zero padding up to the requested size
//!
//! END control packet (sent by the sender from each flow's own socket, i.e.
//! with the flow's exact 4-tuple, after the data, 3 rounds):
//!   0..4   0xFFFFFFFF  reserved seq value: data packets never use it
//!   4..12  ts_ns       u64
//!   12..20 magic       b"TBLGEND1"
//!   20..28 session     u64  random per sender run
//!   28..32 flow_index  u32
//!   32..36 flows       u32  number of flows of the sender
//!   36..44 flow_sent   u64  packets this flow actually sent
//!   44..52 total_sent  u64  packets all flows sent
//!   52     clock       u8   0 = monotonic, 1 = realtime
//!   53     round       u8   0,1,2
//! A datagram is an END only if it is >= 54 bytes, seq == 0xFFFFFFFF and the
//! magic matches; a data packet can never look like that because the sender
//! never emits seq 0xFFFFFFFF (it stops a flow before its seq would wrap).

pub const HDR_LEN: usize = 12;
pub const END_SEQ: u32 = u32::MAX;
pub const END_MAGIC: &[u8; 8] = b"TBLGEND1";
pub const END_LEN: usize = 54;
/// Highest sequence number a data packet may carry.
pub const MAX_DATA_SEQ: u32 = u32::MAX - 1;

#[inline]
pub fn encode_header(buf: &mut [u8], seq: u32, ts_ns: u64) {
    buf[0..4].copy_from_slice(&seq.to_be_bytes());
    buf[4..12].copy_from_slice(&ts_ns.to_be_bytes());
}

#[inline]
pub fn decode_header(buf: &[u8]) -> Option<(u32, u64)> {
    if buf.len() < HDR_LEN {
        return None;
    }
    let seq = u32::from_be_bytes(buf[0..4].try_into().unwrap());
    let ts = u64::from_be_bytes(buf[4..12].try_into().unwrap());
    Some((seq, ts))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndInfo {
    pub session: u64,
    pub flow_index: u32,
    pub flows: u32,
    pub flow_sent: u64,
    pub total_sent: u64,
    pub clock: u8,
    pub round: u8,
}

pub fn encode_end(buf: &mut [u8; END_LEN], ts_ns: u64, e: &EndInfo) {
    encode_header(buf, END_SEQ, ts_ns);
    buf[12..20].copy_from_slice(END_MAGIC);
    buf[20..28].copy_from_slice(&e.session.to_be_bytes());
    buf[28..32].copy_from_slice(&e.flow_index.to_be_bytes());
    buf[32..36].copy_from_slice(&e.flows.to_be_bytes());
    buf[36..44].copy_from_slice(&e.flow_sent.to_be_bytes());
    buf[44..52].copy_from_slice(&e.total_sent.to_be_bytes());
    buf[52] = e.clock;
    buf[53] = e.round;
}

/// Parse an END packet; None if `buf` is not one (caller checks seq first).
pub fn decode_end(buf: &[u8]) -> Option<EndInfo> {
    if buf.len() < END_LEN || &buf[12..20] != END_MAGIC {
        return None;
    }
    let (seq, _) = decode_header(buf)?;
    if seq != END_SEQ {
        return None;
    }
    let u64at = |o: usize| u64::from_be_bytes(buf[o..o + 8].try_into().unwrap());
    let u32at = |o: usize| u32::from_be_bytes(buf[o..o + 4].try_into().unwrap());
    Some(EndInfo {
        session: u64at(20),
        flow_index: u32at(28),
        flows: u32at(32),
        flow_sent: u64at(36),
        total_sent: u64at(44),
        clock: buf[52],
        round: buf[53],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let mut b = [0u8; 12];
        encode_header(&mut b, 0xDEADBEEF, 0x0102030405060708);
        assert_eq!(b, [0xDE, 0xAD, 0xBE, 0xEF, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(decode_header(&b), Some((0xDEADBEEF, 0x0102030405060708)));
        assert_eq!(decode_header(&b[..11]), None);
        // 40-byte IPv4 packet = 12-byte UDP payload carries the full header
        let mut p = vec![0u8; 40 - 28];
        encode_header(&mut p, 7, 99);
        assert_eq!(decode_header(&p), Some((7, 99)));
    }

    #[test]
    fn end_roundtrip_and_not_data() {
        let e = EndInfo {
            session: 5,
            flow_index: 3,
            flows: 100,
            flow_sent: 1234,
            total_sent: 99999,
            clock: 1,
            round: 2,
        };
        let mut b = [0u8; END_LEN];
        encode_end(&mut b, 42, &e);
        assert_eq!(decode_end(&b), Some(e));
        assert_eq!(decode_header(&b).unwrap().0, END_SEQ);
        // data packet with padding never decodes as END
        let mut d = vec![0u8; 100];
        encode_header(&mut d, MAX_DATA_SEQ, 1);
        assert_eq!(decode_end(&d), None);
        // truncated END or bad magic is rejected
        assert_eq!(decode_end(&b[..END_LEN - 1]), None);
        let mut bad = b;
        bad[12] ^= 1;
        assert_eq!(decode_end(&bad), None);
    }
}
