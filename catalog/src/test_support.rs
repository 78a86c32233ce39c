//! The one-metalake workload that logs for tests and benchmarks are written with
//! (`cli/tests/walcheck/state.rs`, `benches/benches/verify_state.rs`): entry 0 creates the
//! metalake `lake` (entity 1 when it is the log's first entry), every later entry a catalog
//! under it. It lives here, beside the commands, so that those logs share one definition; the
//! catalog itself never calls it.

use crate::{Command, EntityId, EntityKind};

/// The `i`-th command of the workload: the metalake `lake` when `i` is 0, else a catalog named
/// `name` with properties `props` under entity 1.
pub fn lake_command(i: u64, name: String, props: Vec<u8>) -> Command {
    if i == 0 {
        Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] }
    } else {
        Command::Create { parent: Some(EntityId(1)), kind: EntityKind::Catalog, name, props }
    }
}
