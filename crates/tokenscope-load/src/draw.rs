//! Per-request draws that need no state: a request's choices (its class,
//! whether its user leaves and when, its ids) are a seeded hash of its
//! id, so they are the same each run and cost nothing on the hot path.

/// splitmix64's finaliser: a bijection that spreads every input bit.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash as a uniform number in [0, 1).
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_spread_over_the_unit_interval() {
        let n = 10_000u64;
        let below_half = (0..n).filter(|i| super::unit(super::mix(*i)) < 0.5).count();
        assert!((4_800..5_200).contains(&below_half), "{below_half}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&super::unit(super::mix(i)))));
    }
}
