//! Arbitrary bytes as `wal.meta` plus 1-3 segment files (layout: `harness::case_from_bytes`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wal_fuzz::harness;

fuzz_target!(|data: &[u8]| {
    wal_fuzz::guarded(|| {
        let case = harness::case_from_bytes(data);
        let out = harness::check(&case);
        wal_fuzz::check_verifier(&case, &out);
    });
});
