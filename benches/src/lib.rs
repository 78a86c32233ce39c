//! Helpers shared by the benchmarks in `benches/benches/` (the benchmarks themselves live there).

/// The median of `v`, which is sorted in place (total order, so a NaN cannot panic).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `q` quantile (0.0..=1.0) of `v`, nearest rank below; `v` is left as it is.
pub fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * q) as usize]
}
