//! The workspace's one seeded pseudo-random generator: the simulator's choices, the crash and
//! fault sweeps, the model tests, the fixture generator, the power-loss workloads, the
//! comparison's payload filler.
//!
//! A crate of its own, with no dependencies, so that the tools that need only the generator
//! (fixtures, powerloss, the comparison) do not build the simulator for it; `wal-sim`
//! re-exports it as `wal_sim::Rng`.
//!
//! Every draw is a pure function of the seed, so a failure's seed replays it. The output
//! sequences are pinned, not only the algorithms: committed files (the fixture logs and their
//! manifest), constants (the format-stability hash) and recorded failing seeds were all made with
//! them, and a generator that changed would silently turn each into something else. The known-
//! answer test below holds each algorithm to its first outputs.
//!
//! It is three small textbook generators behind one type rather than one, because the copies it
//! replaced had already fixed three sequences that callers depend on; a new caller takes
//! [`Rng::splitmix64`] (the best-mixed of them, and fine for any seed).

/// How [`Rng`] steps its state and derives an output (see each constructor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    XorShift64,
    XorShift64Star,
    SplitMix64,
}

/// A seeded generator: 64 bits of state, one of three fixed algorithms chosen at construction.
/// Not for anything secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
    algorithm: Algorithm,
}

/// The state a xorshift generator takes when it would be zero (see [`not_zero`]): the 64-bit
/// golden ratio, as the simulator's generator always had it.
const NOT_ZERO: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// Marsaglia's xorshift64 (shifts 13, 7, 17); each output is the new state. Used where a
    /// sequence was fixed with it: the simulator's garbage sectors, the format-stability hash,
    /// the model test's long run.
    pub const fn xorshift64(seed: u64) -> Rng {
        Rng { state: seed, algorithm: Algorithm::XorShift64 }
    }

    /// Vigna's xorshift64* (shifts 12, 25, 27, then the new state times 0x2545F4914F6CDD1D):
    /// the simulated file system's seeded choices (`wal_sim::Faults::seed`), the crash tests'
    /// histories, the fuzz corpus's inputs.
    pub const fn xorshift64_star(seed: u64) -> Rng {
        Rng { state: seed, algorithm: Algorithm::XorShift64Star }
    }

    /// Steele, Lea and Flood's splitmix64 (the state advances by the golden ratio, the output
    /// is its finalizer of the new state): any seed, 0 included, starts a good sequence. The
    /// fixture logs' content, the power-loss workloads, the kill -9 test.
    pub const fn splitmix64(seed: u64) -> Rng {
        Rng { state: seed, algorithm: Algorithm::SplitMix64 }
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        match self.algorithm {
            Algorithm::XorShift64 => {
                let mut x = self.state;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                self.state = not_zero(x);
                self.state
            }
            Algorithm::XorShift64Star => {
                let mut x = self.state;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                self.state = not_zero(x);
                self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
            }
            Algorithm::SplitMix64 => {
                self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
        }
    }

    /// A draw in `0..n` (`0` for `n == 0`), by remainder: slightly uneven for an `n` that does
    /// not divide 2^64, which no caller minds, and the sequences above were fixed with it.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A draw in `lo..=hi` (`lo` when `hi < lo`), as [`Rng::below`] does it.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        match hi.saturating_sub(lo).checked_add(1) {
            Some(n) => lo + self.below(n),
            None => self.next_u64(),
        }
    }

    /// A fair coin: the lowest bit of the next draw.
    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// Puts `items` in a random order (Fisher and Yates: each of the orders reachable by
    /// [`Rng::below`]'s draws, one swap per item).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// The current state: a generator made with the same constructor from it goes on with the
    /// same sequence (how `wal_sim::Faults::seed` keeps the simulator's generator as a number).
    pub fn state(&self) -> u64 {
        self.state
    }
}

/// A xorshift state that came out zero (from a zero seed: xorshift keeps 0 at 0 forever and
/// takes every other state to another non-zero one) restarts at [`NOT_ZERO`].
fn not_zero(x: u64) -> u64 {
    if x == 0 {
        NOT_ZERO
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_coins_and_shuffles_stay_in_bounds_and_vary() {
        let mut r = Rng::splitmix64(7);
        let draws: Vec<u64> = (0..2000).map(|_| r.range(16, 19)).collect();
        assert!(draws.iter().all(|d| (16..=19).contains(d)));
        assert!((16..=19).all(|v| draws.contains(&v)), "every value of a small range comes up");
        assert_eq!(r.range(5, 5), 5);
        assert_eq!(r.range(9, 3), 9, "an empty range gives its low end");
        let _ = r.range(0, u64::MAX); // the whole range: no overflow
        let heads = (0..2000).filter(|_| r.bool()).count();
        assert!((800..1200).contains(&heads), "{heads} heads in 2000");
        let mut v: Vec<u32> = (0..50).collect();
        r.shuffle(&mut v);
        assert_ne!(v, (0..50).collect::<Vec<_>>(), "a shuffle of 50 moved nothing");
        v.sort_unstable();
        assert_eq!(v, (0..50).collect::<Vec<_>>(), "a shuffle is a permutation");
        r.shuffle::<u8>(&mut []);
    }

    fn first(mut r: Rng, n: usize) -> Vec<u64> {
        (0..n).map(|_| r.next_u64()).collect()
    }

    /// Known answers: the first outputs of each algorithm, as the copies this type replaced
    /// gave them. If this fails, committed fixtures, the format-stability hash and recorded seeds
    /// no longer mean what they did: do not change the expected values, fix the generator.
    #[test]
    fn known_answers() {
        assert_eq!(
            first(Rng::xorshift64(1), 4),
            [0x4082_2041, 0x1000_4106_0c01_1441, 0x9b1e_842f_6e86_2629, 0xf554_f503_555d_8025]
        );
        assert_eq!(
            first(Rng::xorshift64_star(1), 4),
            [0x47e4_ce4b_896c_dd1d, 0xabcf_a6a8_e079_651d, 0xb9d1_0d8f_eb73_1f57, 0x4db4_18a0_bb1b_019d]
        );
        // splitmix64 from 0: the reference implementation's first outputs.
        assert_eq!(
            first(Rng::splitmix64(0), 4),
            [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f, 0xf88b_b8a8_724c_81ec]
        );
        // A zero seed does not stick at zero (the simulator's generator always did this).
        assert_eq!(first(Rng::xorshift64_star(0), 1), [0xfb04_e882_8c6a_2f61]);
        assert_ne!(first(Rng::xorshift64(0), 3), [0, 0, 0]);
    }

    #[test]
    fn state_resumes_the_sequence() {
        let mut a = Rng::xorshift64_star(42);
        a.next_u64();
        let mut b = Rng::xorshift64_star(a.state());
        assert_eq!(first(a, 5), first(b.clone(), 5));
        assert!(b.below(0) == 0 && b.below(7) < 7);
    }
}
