//! The wire format: a request is `u32 total length | u32 response length | filler` (little
//! endian, lengths include the header), a response is `u32 total length | filler`. Lengths on
//! the wire let either end find message boundaries in a TCP byte stream without a parser, so
//! the cost measured is the network's and the kernel's, not a serialisation library's.

pub const HEADER: u32 = 8;
pub const RESP_HEADER: u32 = 4;

pub fn header(buf: &[u8]) -> Option<(u32, u32)> {
    if buf.len() < HEADER as usize {
        return None;
    }
    let total = u32::from_le_bytes(buf[0..4].try_into().ok()?);
    let resp = u32::from_le_bytes(buf[4..8].try_into().ok()?);
    Some((total, resp))
}

pub fn request(out: &mut Vec<u8>, total: u32, resp: u32) {
    out.clear();
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&resp.to_le_bytes());
    out.resize(total as usize, 0x5a);
}

pub fn response(out: &mut Vec<u8>, total: u32) {
    out.extend_from_slice(&total.to_le_bytes());
    let len = out.len() + total as usize - RESP_HEADER as usize;
    out.resize(len, 0xa5);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut req = Vec::new();
        request(&mut req, 100, 300);
        assert_eq!(req.len(), 100);
        assert_eq!(header(&req), Some((100, 300)));
        assert_eq!(header(&req[..7]), None);
        let mut resp = vec![1, 2];
        response(&mut resp, 300);
        assert_eq!(resp.len(), 302);
        assert_eq!(u32::from_le_bytes(resp[2..6].try_into().unwrap()), 300);
    }
}
