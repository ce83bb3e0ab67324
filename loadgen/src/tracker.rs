//! Per-flow sequence accounting: unique, duplicate, reordered.
//!
//! For each flow we keep the highest sequence number seen and a ring bitmap
//! of the last WINDOW sequence numbers below it. A packet is
//! - a duplicate if its bit is already set,
//! - reordered if it is new but lower than the highest seen,
//! - "beyond window" if it is more than WINDOW below the highest seen (it is
//!   counted as unique and reordered, duplicates of it cannot be detected).
//!
//! Memory: WINDOW/8 bytes per flow (32 KiB).

pub const WINDOW: u64 = 1 << 18;
const WORDS: usize = (WINDOW / 64) as usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// new and in order (seq > highest so far, possibly with a gap)
    InOrder,
    /// new but lower than the highest seen
    Reordered,
    /// already seen
    Duplicate,
    /// too old to check for duplicates; counted as unique + reordered
    BeyondWindow,
}

pub struct FlowTracker {
    bits: Vec<u64>,
    /// highest seq seen + 1 (0 = nothing yet)
    next: u64,
    pub received: u64,
    pub unique: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub beyond_window: u64,
}

impl Default for FlowTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl FlowTracker {
    pub fn new() -> FlowTracker {
        FlowTracker {
            bits: vec![0; WORDS],
            next: 0,
            received: 0,
            unique: 0,
            duplicates: 0,
            reordered: 0,
            beyond_window: 0,
        }
    }

    #[inline]
    fn idx(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    pub fn highest(&self) -> Option<u64> {
        self.next.checked_sub(1)
    }

    #[inline]
    pub fn record(&mut self, seq: u32) -> Verdict {
        let seq = seq as u64;
        self.received += 1;
        if seq >= self.next {
            // advance: clear bits for the sequence numbers we skip over
            let gap = seq - self.next;
            if gap >= WINDOW {
                self.bits.iter_mut().for_each(|w| *w = 0);
            } else {
                let mut s = self.next;
                while s < seq {
                    // clear whole words when aligned
                    if s.is_multiple_of(64) && seq - s >= 64 {
                        self.bits[((s % WINDOW) / 64) as usize] = 0;
                        s += 64;
                    } else {
                        let (w, m) = Self::idx(s);
                        self.bits[w] &= !m;
                        s += 1;
                    }
                }
            }
            let (w, m) = Self::idx(seq);
            self.bits[w] |= m;
            self.next = seq + 1;
            self.unique += 1;
            Verdict::InOrder
        } else if self.next - seq > WINDOW {
            self.unique += 1;
            self.reordered += 1;
            self.beyond_window += 1;
            Verdict::BeyondWindow
        } else {
            let (w, m) = Self::idx(seq);
            if self.bits[w] & m != 0 {
                self.duplicates += 1;
                Verdict::Duplicate
            } else {
                self.bits[w] |= m;
                self.unique += 1;
                self.reordered += 1;
                Verdict::Reordered
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(seqs: &[u32]) -> FlowTracker {
        let mut t = FlowTracker::new();
        for &s in seqs {
            t.record(s);
        }
        t
    }

    #[test]
    fn in_order_no_loss() {
        let t = feed(&(0..1000).collect::<Vec<_>>());
        assert_eq!((t.received, t.unique, t.duplicates, t.reordered), (1000, 1000, 0, 0));
        assert_eq!(t.highest(), Some(999));
    }

    #[test]
    fn loss_is_expected_minus_unique() {
        // 10 sent, 3 and 7 lost
        let t = feed(&[0, 1, 2, 4, 5, 6, 8, 9]);
        assert_eq!(t.unique, 8);
        assert_eq!(10 - t.unique, 2);
        assert_eq!(t.reordered, 0);
        // tail loss: not visible from seqs, only from expected count
        let t = feed(&[0, 1, 2]);
        assert_eq!(5 - t.unique, 2);
    }

    #[test]
    fn reorder_and_duplicates() {
        let mut t = FlowTracker::new();
        assert_eq!(t.record(0), Verdict::InOrder);
        assert_eq!(t.record(2), Verdict::InOrder);
        assert_eq!(t.record(1), Verdict::Reordered);
        assert_eq!(t.record(1), Verdict::Duplicate);
        assert_eq!(t.record(2), Verdict::Duplicate);
        assert_eq!(t.record(0), Verdict::Duplicate);
        assert_eq!(t.record(3), Verdict::InOrder);
        assert_eq!((t.received, t.unique, t.duplicates, t.reordered), (7, 4, 3, 1));
    }

    #[test]
    fn gaps_clear_stale_bits() {
        let mut t = FlowTracker::new();
        // fill the window, then jump so the ring wraps; old bits must not
        // make new sequence numbers look like duplicates
        for s in 0..(WINDOW as u32) {
            t.record(s);
        }
        let base = WINDOW as u32 + 10;
        assert_eq!(t.record(base + 100), Verdict::InOrder);
        for s in base..base + 100 {
            assert_eq!(t.record(s), Verdict::Reordered, "seq {s}");
        }
        assert_eq!(t.duplicates, 0);
        // huge jump clears everything
        let far = 10 * WINDOW as u32;
        assert_eq!(t.record(far), Verdict::InOrder);
        assert_eq!(t.record(far - 1), Verdict::Reordered);
        // too old
        assert_eq!(t.record(5), Verdict::BeyondWindow);
        assert_eq!(t.beyond_window, 1);
    }
}
