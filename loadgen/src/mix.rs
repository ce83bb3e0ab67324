//! Packet size mixes. All sizes are IP total lengths (L3, IP header included).
//!
//! A mix is a *cycle* of sizes. Weighted mixes (`--size`, `--imix simple`,
//! `--mix`) are expanded into one cycle whose length is the sum of the
//! weights (after dividing by their gcd) and re-shuffled with a seeded PRNG at
//! the start of every cycle, so proportions are exact over each cycle and the
//! order is deterministic for a given seed. Genome mixes (`--genome`) give the
//! repeating sequence directly and are not shuffled.

use std::collections::BTreeMap;

/// RFC 6985 (IMIX Genome) size letters. `z` (interface MTU) and `x`
/// (custom size) need out-of-band information and are not supported.
pub const GENOME_LETTERS: &[(char, u32)] = &[
    ('a', 64),
    ('b', 128),
    ('c', 256),
    ('d', 512),
    ('e', 1024),
    ('f', 1280),
    ('g', 1518),
    ('h', 2112),
    ('i', 9000),
    ('j', 16000),
];

/// Largest size a cycle may expand to (sum of reduced weights / genome length).
pub const MAX_CYCLE: usize = 1 << 20;
/// Largest accepted size (IP total length field is 16 bits).
pub const MAX_SIZE: u32 = 65535;

#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    /// "fixed", "imix-simple", "weighted" or "genome".
    pub kind: &'static str,
    /// The user's spec as given, e.g. "40:7,576:4,1500:1".
    pub spec: String,
    /// (size, weight) pairs, weights reduced by their gcd; for genome the
    /// weights are letter counts.
    pub weights: Vec<(u32, u32)>,
    /// One cycle of sizes in base (unshuffled) order.
    pub cycle: Vec<u32>,
    /// Whether the cycle is shuffled each time it repeats.
    pub shuffle: bool,
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn parse_size(s: &str) -> Result<u32, String> {
    let v: u32 = s.trim().parse().map_err(|_| format!("invalid packet size '{}'", s.trim()))?;
    if v == 0 || v > MAX_SIZE {
        return Err(format!("packet size {v} out of range 1..{MAX_SIZE}"));
    }
    Ok(v)
}

impl Mix {
    fn from_weights(kind: &'static str, spec: &str, pairs: Vec<(u32, u32)>) -> Result<Mix, String> {
        // merge duplicates, keep ascending size order
        let mut m: BTreeMap<u32, u64> = BTreeMap::new();
        for (s, w) in pairs {
            *m.entry(s).or_default() += w as u64;
        }
        let g = m.values().fold(0u32, |g, &w| gcd(g, w.min(u32::MAX as u64) as u32));
        let weights: Vec<(u32, u32)> = m.iter().map(|(&s, &w)| (s, (w / g as u64) as u32)).collect();
        let total: u64 = weights.iter().map(|&(_, w)| w as u64).sum();
        if total as usize > MAX_CYCLE {
            return Err(format!("mix cycle of {total} packets is too long (max {MAX_CYCLE})"));
        }
        let mut cycle = Vec::with_capacity(total as usize);
        for &(s, w) in &weights {
            cycle.extend(std::iter::repeat_n(s, w as usize));
        }
        Ok(Mix {
            kind,
            spec: spec.to_string(),
            weights,
            cycle,
            shuffle: weights_len_gt1(&m),
        })
    }

    /// `--size 64`
    pub fn fixed(spec: &str) -> Result<Mix, String> {
        let s = parse_size(spec)?;
        Mix::from_weights("fixed", spec, vec![(s, 1)])
    }

    /// `--imix simple` (7 x 40, 4 x 576, 1 x 1500).
    pub fn imix(name: &str) -> Result<Mix, String> {
        match name.trim() {
            "simple" => Mix::from_weights("imix-simple", "simple", vec![(40, 7), (576, 4), (1500, 1)]),
            other => Err(format!("unknown IMIX '{other}' (only 'simple' is defined)")),
        }
    }

    /// `--mix 40:7,576:4,1500:1` (a bare size means weight 1).
    pub fn weighted(spec: &str) -> Result<Mix, String> {
        let mut pairs = Vec::new();
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(format!("empty element in mix '{spec}'"));
            }
            let (s, w) = match item.split_once(':') {
                Some((s, w)) => {
                    let w: u32 = w
                        .trim()
                        .parse()
                        .map_err(|_| format!("invalid weight '{}' in mix '{spec}'", w.trim()))?;
                    (parse_size(s)?, w)
                }
                None => (parse_size(item)?, 1),
            };
            if w == 0 {
                return Err(format!("zero weight for size {s} in mix '{spec}'"));
            }
            pairs.push((s, w));
        }
        Mix::from_weights("weighted", spec, pairs)
    }

    /// `--genome aaabg`: RFC 6985 letters, sequence used as given.
    pub fn genome(spec: &str) -> Result<Mix, String> {
        let spec_t = spec.trim();
        if spec_t.is_empty() {
            return Err("empty genome".into());
        }
        if spec_t.len() > MAX_CYCLE {
            return Err(format!("genome longer than {MAX_CYCLE} letters"));
        }
        let mut cycle = Vec::with_capacity(spec_t.len());
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for c in spec_t.chars() {
            let size = GENOME_LETTERS
                .iter()
                .find(|(l, _)| *l == c.to_ascii_lowercase())
                .map(|&(_, s)| s)
                .ok_or_else(|| format!("unsupported genome letter '{c}' (supported: a-j)"))?;
            cycle.push(size);
            *counts.entry(size).or_default() += 1;
        }
        Ok(Mix {
            kind: "genome",
            spec: spec_t.to_string(),
            weights: counts.into_iter().collect(),
            cycle,
            shuffle: false,
        })
    }

    pub fn min_size(&self) -> u32 {
        *self.cycle.iter().min().unwrap()
    }
    pub fn max_size(&self) -> u32 {
        *self.cycle.iter().max().unwrap()
    }
    /// Mean IP total length over one cycle.
    pub fn mean_size(&self) -> f64 {
        self.cycle.iter().map(|&s| s as f64).sum::<f64>() / self.cycle.len() as f64
    }
}

fn weights_len_gt1(m: &BTreeMap<u32, u64>) -> bool {
    m.len() > 1
}

/// SplitMix64: tiny, well-known, deterministic PRNG (not cryptographic).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0), Lemire's multiply-shift (bias negligible for our n).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// Endless per-packet size sequence drawn from a mix.
pub struct SizeSeq {
    cycle: Vec<u32>,
    pos: usize,
    rng: Rng,
    shuffle: bool,
}

impl SizeSeq {
    pub fn new(mix: &Mix, seed: u64) -> SizeSeq {
        let mut s = SizeSeq {
            cycle: mix.cycle.clone(),
            pos: 0,
            rng: Rng::new(seed),
            shuffle: mix.shuffle,
        };
        if s.shuffle {
            s.rng.shuffle(&mut s.cycle);
        }
        s
    }
    #[inline]
    pub fn next_size(&mut self) -> u32 {
        if self.pos == self.cycle.len() {
            self.pos = 0;
            if self.shuffle {
                self.rng.shuffle(&mut self.cycle);
            }
        }
        let v = self.cycle[self.pos];
        self.pos += 1;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fixed() {
        let m = Mix::fixed("64").unwrap();
        assert_eq!(m.cycle, vec![64]);
        assert_eq!(m.kind, "fixed");
        assert!(!m.shuffle);
        assert!(Mix::fixed("abc").is_err());
        assert!(Mix::fixed("0").is_err());
        assert!(Mix::fixed("70000").is_err());
        assert!(Mix::fixed("-5").is_err());
    }

    #[test]
    fn parse_imix_simple() {
        let m = Mix::imix("simple").unwrap();
        assert_eq!(m.weights, vec![(40, 7), (576, 4), (1500, 1)]);
        assert_eq!(m.cycle.len(), 12);
        assert!((m.mean_size() - (7.0 * 40.0 + 4.0 * 576.0 + 1500.0) / 12.0).abs() < 1e-9);
        assert!(Mix::imix("complex").is_err());
    }

    #[test]
    fn parse_weighted() {
        let m = Mix::weighted("40:7,576:4,1500:1").unwrap();
        assert_eq!(m.weights, vec![(40, 7), (576, 4), (1500, 1)]);
        assert_eq!(m.cycle.len(), 12);
        // gcd reduction and merging
        let m = Mix::weighted("100:20, 200:10,100:10").unwrap();
        assert_eq!(m.weights, vec![(100, 3), (200, 1)]);
        // bare size = weight 1
        let m = Mix::weighted("64,128").unwrap();
        assert_eq!(m.weights, vec![(64, 1), (128, 1)]);
        for bad in ["", "40:", ":3", "40:0", "40:x", "40:7,,1500:1", "40:7;1500:1", "99999:1"] {
            assert!(Mix::weighted(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn parse_genome() {
        let m = Mix::genome("aabg").unwrap();
        assert_eq!(m.cycle, vec![64, 64, 128, 1518]);
        assert!(!m.shuffle);
        assert_eq!(m.weights, vec![(64, 2), (128, 1), (1518, 1)]);
        let m = Mix::genome("abcdefghij").unwrap();
        assert_eq!(m.cycle, vec![64, 128, 256, 512, 1024, 1280, 1518, 2112, 9000, 16000]);
        assert!(Mix::genome("abz").is_err());
        assert!(Mix::genome("").is_err());
        assert!(Mix::genome("a1").is_err());
        // genome sequence repeats in the given order
        let mut s = SizeSeq::new(&Mix::genome("acb").unwrap(), 1);
        let got: Vec<u32> = (0..6).map(|_| s.next_size()).collect();
        assert_eq!(got, vec![64, 256, 128, 64, 256, 128]);
    }

    #[test]
    fn imix_proportions_exact() {
        let m = Mix::imix("simple").unwrap();
        let mut s = SizeSeq::new(&m, 42);
        let n = 100_000usize;
        let mut c: BTreeMap<u32, usize> = BTreeMap::new();
        for i in 0..n {
            *c.entry(s.next_size()).or_default() += 1;
            // exact at every cycle boundary
            if (i + 1) % 12 == 0 {
                assert_eq!(c[&40] * 12, 7 * (i + 1));
                assert_eq!(c[&576] * 12, 4 * (i + 1));
            }
        }
        for (size, w) in [(40, 7.0), (576, 4.0), (1500, 1.0)] {
            let frac = c[&size] as f64 / n as f64;
            assert!((frac - w / 12.0).abs() < 0.01 * w / 12.0, "size {size}: {frac}");
        }
    }

    #[test]
    fn shuffle_deterministic_and_mixed() {
        let m = Mix::imix("simple").unwrap();
        let a: Vec<u32> = {
            let mut s = SizeSeq::new(&m, 7);
            (0..120).map(|_| s.next_size()).collect()
        };
        let b: Vec<u32> = {
            let mut s = SizeSeq::new(&m, 7);
            (0..120).map(|_| s.next_size()).collect()
        };
        let c: Vec<u32> = {
            let mut s = SizeSeq::new(&m, 8);
            (0..120).map(|_| s.next_size()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(&a[..12], &m.cycle[..]);
    }
}
