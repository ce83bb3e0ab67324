//! Message size mixes: weighted ranges of message sizes (bytes, the 8-byte frame header
//! included), e.g. `64-128:70,200-512:25,1024-4096:5`. A size is drawn by weight, then
//! uniformly inside its range, from a seeded PRNG (xorshift64*), so a run is repeatable.

pub const MIN_SIZE: u32 = 8; // the frame header: total length + response length
pub const MAX_SIZE: u32 = 1 << 20;

#[derive(Clone, Debug, PartialEq)]
pub struct SizeMix {
    pub spec: String,
    /// (low, high, weight), inclusive ranges
    pub parts: Vec<(u32, u32, u32)>,
    total: u64,
}

fn parse_size(s: &str, part: &str) -> Result<u32, String> {
    let v: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("mix part '{part}': '{}' is not a size in bytes", s.trim()))?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&v) {
        return Err(format!("mix part '{part}': size {v} out of range {MIN_SIZE}..{MAX_SIZE} bytes"));
    }
    Ok(v)
}

impl SizeMix {
    pub fn parse(spec: &str) -> Result<SizeMix, String> {
        let mut parts = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (range, w) = part.split_once(':').unwrap_or((part, "1"));
            let w: u32 = w
                .trim()
                .parse()
                .map_err(|_| format!("mix part '{part}': weight '{}' is not a whole number", w.trim()))?;
            if w == 0 {
                return Err(format!("mix part '{part}': weight 0"));
            }
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (parse_size(a, part)?, parse_size(b, part)?),
                None => {
                    let v = parse_size(range, part)?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(format!("mix part '{part}': range {lo}-{hi} is reversed"));
            }
            parts.push((lo, hi, w));
        }
        if parts.is_empty() {
            return Err("empty size mix".into());
        }
        let total = parts.iter().map(|p| p.2 as u64).sum();
        Ok(SizeMix {
            spec: spec.to_string(),
            parts,
            total,
        })
    }

    /// Expected message size: each range's midpoint by its weight.
    pub fn mean_size(&self) -> f64 {
        self.parts
            .iter()
            .map(|&(lo, hi, w)| (lo as f64 + hi as f64) / 2.0 * w as f64)
            .sum::<f64>()
            / self.total as f64
    }

    pub fn draw(&self, rng: &mut Rng) -> u32 {
        let mut r = rng.next_u64() % self.total;
        for &(lo, hi, w) in &self.parts {
            if r < w as u64 {
                return lo + (rng.next_u64() % (hi - lo + 1) as u64) as u32;
            }
            r -= w as u64;
        }
        self.parts[self.parts.len() - 1].1
    }
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_fixed() {
        let m = SizeMix::parse("64-128:70,200-512:25,1024-4096:5").unwrap();
        assert_eq!(m.parts, vec![(64, 128, 70), (200, 512, 25), (1024, 4096, 5)]);
        assert!((m.mean_size() - (96.0 * 0.70 + 356.0 * 0.25 + 2560.0 * 0.05)).abs() < 1e-9);
        assert_eq!(SizeMix::parse("100").unwrap().parts, vec![(100, 100, 1)]);
    }

    #[test]
    fn refuses_bad_parts() {
        for bad in ["", "4-10:1", "64-32:1", "64:0", "64:x", "abc", "64-2000000"] {
            assert!(SizeMix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn draws_in_proportion_and_in_range() {
        let m = SizeMix::parse("64-128:70,200-512:25,1024-4096:5").unwrap();
        let mut rng = Rng::new(1);
        let mut small = 0;
        for _ in 0..100_000 {
            let s = m.draw(&mut rng);
            assert!((64..=4096).contains(&s));
            if s <= 128 {
                small += 1;
            }
        }
        assert!((68_000..72_000).contains(&small), "{small}");
    }
}
