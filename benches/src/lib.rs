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

/// True when a benchmark binary runs as a smoke test rather than a measurement: under
/// `cargo test` (cargo passes `--bench` only from `cargo bench`) or with `WAL_BENCH_SMOKE=1`.
/// The benchmarks with their own `main` then run every workload once at a tiny size, so CI
/// runs their code without spending minutes; the numbers they print mean nothing.
/// Decided once: the benchmarks ask inside their timed loops.
pub fn smoke() -> bool {
    static SMOKE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SMOKE.get_or_init(|| {
        std::env::var_os("WAL_BENCH_SMOKE").is_some_and(|v| v == "1")
            || !std::env::args().any(|a| a == "--bench")
    })
}

/// `full`, or `small` in a smoke run (see [`smoke`]).
pub fn scaled<T>(full: T, small: T) -> T {
    if smoke() {
        small
    } else {
        full
    }
}
