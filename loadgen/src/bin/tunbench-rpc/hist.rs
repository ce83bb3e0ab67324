//! Latency histogram for the RPC client: log-linear (64 sub-buckets per power of two, so a
//! reported value is within 1.6% of the true one), mergeable across client threads, with the
//! sum of squares kept exactly for the standard deviation. Values are nanoseconds.

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
const MAX_MSB: u32 = 40; // ~18 minutes
const NBUCKETS: usize = ((MAX_MSB - SUB_BITS + 2) as usize) * SUB as usize;

#[derive(Clone)]
pub struct Hist {
    counts: Vec<u64>,
    pub count: u64,
    sum: f64,
    sum_sq: f64,
    pub min: u64,
    pub max: u64,
}

fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let v = v.min((1u64 << (MAX_MSB + 1)) - 1);
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    ((msb - SUB_BITS + 1) as usize) * SUB as usize + ((v >> shift) & (SUB - 1)) as usize
}

fn bucket_mid(b: usize) -> f64 {
    if b < SUB as usize {
        return b as f64;
    }
    let g = (b / SUB as usize) as u32;
    let width = 1u64 << (g - 1);
    let lo = (SUB + (b % SUB as usize) as u64) * width;
    lo as f64 + (width as f64 - 1.0) / 2.0
}

impl Hist {
    pub fn new() -> Hist {
        Hist {
            counts: vec![0; NBUCKETS],
            count: 0,
            sum: 0.0,
            sum_sq: 0.0,
            min: u64::MAX,
            max: 0,
        }
    }

    pub fn record(&mut self, v: u64) {
        self.counts[bucket_of(v)] += 1;
        self.count += 1;
        self.sum += v as f64;
        self.sum_sq += (v as f64) * (v as f64);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// Sample standard deviation (n - 1).
    pub fn std(&self) -> Option<f64> {
        if self.count < 2 {
            return (self.count == 1).then_some(0.0);
        }
        let n = self.count as f64;
        let var = (self.sum_sq - self.sum * self.sum / n) / (n - 1.0);
        Some(var.max(0.0).sqrt())
    }

    /// Nearest-rank percentile, reported as the bucket's midpoint clamped to [min, max].
    pub fn percentile(&self, p: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.count as f64 - 1e-9).ceil().max(1.0) as u64;
        let rank = rank.min(self.count);
        let mut cum = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            cum += c;
            if cum >= rank {
                return Some(bucket_mid(b).clamp(self.min as f64, self.max as f64));
            }
        }
        Some(self.max as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_within_resolution_and_merge() {
        let mut a = Hist::new();
        let mut b = Hist::new();
        for v in 1..=10_000u64 {
            if v % 2 == 0 { a.record(v * 1000) } else { b.record(v * 1000) }
        }
        a.merge(&b);
        assert_eq!(a.count, 10_000);
        let p50 = a.percentile(50.0).unwrap();
        assert!((p50 - 5_000_000.0).abs() / 5_000_000.0 < 0.016, "{p50}");
        let p999 = a.percentile(99.9).unwrap();
        assert!((p999 - 9_990_000.0).abs() / 9_990_000.0 < 0.016, "{p999}");
        assert_eq!(a.min, 1000);
        assert_eq!(a.max, 10_000_000);
        assert!((a.mean().unwrap() - 5_000_500.0).abs() < 1.0);
        let std = a.std().unwrap();
        assert!((std - 2_886_895.7).abs() < 10.0, "{std}");
    }
}
