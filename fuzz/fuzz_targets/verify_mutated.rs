//! A small valid engine log damaged by `(offset, xor)` mutations (layout:
//! `harness::case_from_mutations`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wal_fuzz::harness;

fuzz_target!(|data: &[u8]| {
    wal_fuzz::guarded(|| {
        let case = harness::case_from_mutations(data);
        let out = harness::check(&case);
        wal_fuzz::check_verifier(&case, &out);
    });
});
