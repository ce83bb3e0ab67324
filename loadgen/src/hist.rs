//! Log-linear latency histogram (HDR-style), bounded memory.
//!
//! Values are nanoseconds. Values < 128 ns get exact buckets; above that each
//! power of two [2^k, 2^(k+1)) is split into 128 equal sub-buckets, so a
//! bucket's width is at most 1/128 of its lower bound (reported values are
//! bucket midpoints: relative error <= 0.4%). Range up to 2^44 ns (~4.9 h);
//! larger values are clamped into the last bucket. Memory: ~39 KiB.

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS; // 128
const MAX_MSB: u32 = 43;
const NBUCKETS: usize = ((MAX_MSB - SUB_BITS + 2) as usize) * SUB as usize;

pub struct Histogram {
    counts: Vec<u64>,
    pub count: u64,
    pub sum: u128,
    /// sum of squares, for the standard deviation (values < 2^44 ns: squares < 2^88,
    /// so 2^40 samples fit in u128)
    pub sum_sq: u128,
    pub min: u64,
    pub max: u64,
}

#[inline]
fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = (63 - v.leading_zeros()).min(MAX_MSB);
    let v = v.min((1u64 << (MAX_MSB + 1)) - 1);
    let shift = msb - SUB_BITS;
    ((msb - SUB_BITS + 1) as usize) * SUB as usize + ((v >> shift) & (SUB - 1)) as usize
}

/// (lower bound, width) of a bucket.
fn bucket_range(b: usize) -> (u64, u64) {
    if b < SUB as usize {
        return (b as u64, 1);
    }
    let g = (b / SUB as usize) as u32; // >= 1
    let m = (b % SUB as usize) as u64;
    let width = 1u64 << (g - 1);
    ((SUB + m) * width, width)
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; NBUCKETS],
            count: 0,
            sum: 0,
            sum_sq: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_of(v)] += 1;
        self.count += 1;
        self.sum += v as u128;
        self.sum_sq += (v as u128) * (v as u128);
        if v < self.min {
            self.min = v;
        }
        if v > self.max {
            self.max = v;
        }
    }

    /// Sample standard deviation (n - 1), exact like the mean (not from the buckets); None
    /// below two samples.
    pub fn std(&self) -> Option<f64> {
        if self.count < 2 {
            return None;
        }
        let n = self.count as f64;
        // in u128 first: sum_sq - sum^2/n loses everything to cancellation in f64 when the
        // spread is small against the mean
        let n128 = self.count as u128;
        let exact = self.sum_sq.checked_mul(n128).zip(self.sum.checked_mul(self.sum));
        let num = match exact {
            Some((a, b)) => a.saturating_sub(b) as f64, // n^2 * population variance >= 0
            None => {
                let mean = self.sum as f64 / n; // beyond u128: f64 is then precise enough
                (self.sum_sq as f64 - self.sum as f64 * mean).max(0.0) * n
            }
        };
        Some((num / (n * (n - 1.0))).sqrt())
    }

    pub fn mean(&self) -> Option<f64> {
        if self.count == 0 {
            None
        } else {
            Some(self.sum as f64 / self.count as f64)
        }
    }

    /// Value at percentile `p` (0..=100): the smallest bucket whose cumulative
    /// count reaches ceil(p/100 * n), reported as the bucket midpoint clamped
    /// to [min, max]. Exact for values < 128 ns.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        // small epsilon so that e.g. 99.9% of 1000 is rank 999, not 1000
        let rank = ((p / 100.0) * self.count as f64 - 1e-9).ceil().max(1.0) as u64;
        let rank = rank.min(self.count);
        let mut cum = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            cum += c;
            if cum >= rank {
                let (lo, w) = bucket_range(b);
                let mid = if w == 1 { lo as f64 } else { lo as f64 + (w as f64 - 1.0) / 2.0 };
                return Some(mid.clamp(self.min as f64, self.max as f64));
            }
        }
        Some(self.max as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_and_are_monotonic() {
        let mut prev = 0usize;
        for v in (0..5_000_000u64).step_by(37) {
            let b = bucket_of(v);
            assert!(b >= prev);
            prev = b;
            let (lo, w) = bucket_range(b);
            assert!(v >= lo && v < lo + w, "v={v} b={b} lo={lo} w={w}");
            assert!(w == 1 || (w as f64) / (lo as f64) <= 1.0 / 128.0 + 1e-12);
        }
        assert!(bucket_of(u64::MAX) < NBUCKETS);
    }

    #[test]
    fn percentiles_uniform() {
        let mut h = Histogram::new();
        // 1..=100000 ns
        for v in 1..=100_000u64 {
            h.record(v);
        }
        assert_eq!(h.min, 1);
        assert_eq!(h.max, 100_000);
        assert!((h.mean().unwrap() - 50_000.5).abs() < 1e-6);
        // uniform 1..=100000: sample std = sqrt(n(n+1)/12)
        let want = (100_000f64 * 100_001.0 / 12.0).sqrt();
        assert!((h.std().unwrap() - want).abs() < 1e-6 * want, "{:?}", h.std());
        for (p, exact) in [(50.0, 50_000.0), (90.0, 90_000.0), (99.0, 99_000.0), (99.9, 99_900.0)] {
            let got = h.percentile(p).unwrap();
            assert!((got - exact).abs() / exact < 0.005, "p{p}: {got} vs {exact}");
        }
        assert_eq!(h.percentile(100.0).unwrap(), 100_000.0);
        assert_eq!(h.percentile(0.0).unwrap(), 1.0);
    }

    #[test]
    fn percentiles_small_exact_and_empty() {
        let mut h = Histogram::new();
        assert_eq!(h.percentile(50.0), None);
        assert_eq!(h.mean(), None);
        for v in [10u64, 20, 30, 40] {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), Some(20.0));
        assert_eq!(h.percentile(75.0), Some(30.0));
        assert_eq!(h.percentile(99.0), Some(40.0));
        // one big outlier: p99.9 of 1000 samples sees it only at the top rank
        let mut h = Histogram::new();
        for _ in 0..999 {
            h.record(1000);
        }
        h.record(1_000_000);
        let p99 = h.percentile(99.0).unwrap();
        assert!((p99 - 1000.0).abs() / 1000.0 < 0.005);
        assert!((h.percentile(99.9).unwrap() - 1000.0).abs() / 1000.0 < 0.005);
        assert_eq!(h.percentile(100.0).unwrap(), 1_000_000.0);
    }
}
