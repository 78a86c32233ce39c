//! A directory's files and their bytes: "nothing changed" is these maps being equal (the
//! Raft adapter's tests include this file too).

use std::collections::BTreeMap;
use std::path::Path;

/// Every regular file of `dir`, by name.
pub fn dir_bytes(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            out.insert(e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap());
        }
    }
    out
}
