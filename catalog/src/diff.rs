//! Entity diff: how two catalogs (or two exports) differ, entity by entity, for saying *where* a
//! state digest disagrees (walcheck's snapshot and replica comparison).

use crate::entity::{Entity, EntityId};
use crate::state::Catalog;
use std::cmp::Ordering;
use std::fmt;

/// How one entity differs between the left and the right catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// Only the left catalog has it.
    OnlyLeft(Entity),
    /// Only the right catalog has it.
    OnlyRight(Entity),
    /// Both have it, with different contents.
    Changed { left: Entity, right: Entity },
}

/// One entity that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntityDiff {
    pub id: EntityId,
    pub difference: Difference,
}

/// The entities that differ, in id order: the first `limit` of them, and how many there are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffReport {
    /// Differences counted over the whole of both catalogs.
    pub total: u64,
    /// The first ones (at most the limit asked for).
    pub first: Vec<EntityDiff>,
}

impl DiffReport {
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// The names of the fields in which two versions of one entity differ, in canonical order.
pub fn changed_fields(left: &Entity, right: &Entity) -> Vec<&'static str> {
    let mut f = Vec::new();
    if left.id != right.id {
        f.push("id");
    }
    if left.parent != right.parent {
        f.push("parent");
    }
    if left.kind != right.kind {
        f.push("kind");
    }
    if left.version != right.version {
        f.push("version");
    }
    if left.name() != right.name() {
        f.push("name");
    }
    if left.props() != right.props() {
        f.push("props");
    }
    f
}

fn parent_text(p: Option<EntityId>) -> String {
    p.map_or("the root".into(), |p| p.to_string())
}

fn describe(e: &Entity) -> String {
    format!("{} {:?} v{} under {}", e.kind, e.name(), e.version, parent_text(e.parent))
}

impl fmt::Display for EntityDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entity {}: ", self.id)?;
        match &self.difference {
            Difference::OnlyLeft(e) => write!(f, "only on the left ({})", describe(e)),
            Difference::OnlyRight(e) => write!(f, "only on the right ({})", describe(e)),
            Difference::Changed { left, right } => {
                let mut parts = Vec::new();
                for field in changed_fields(left, right) {
                    parts.push(match field {
                        "parent" => {
                            format!("parent {} vs {}", parent_text(left.parent), parent_text(right.parent))
                        }
                        "kind" => format!("kind {} vs {}", left.kind, right.kind),
                        "version" => format!("version {} vs {}", left.version, right.version),
                        "name" => format!("name {:?} vs {:?}", left.name(), right.name()),
                        "props" => {
                            format!("props differ ({} vs {} bytes)", left.props().len(), right.props().len())
                        }
                        other => other.to_string(),
                    });
                }
                write!(f, "{}", parts.join(", "))
            }
        }
    }
}

/// Compares two catalogs entity by entity (one merge pass over both, in id order).
pub fn diff(left: &Catalog, right: &Catalog, limit: usize) -> DiffReport {
    let mut report = DiffReport::default();
    let push = |report: &mut DiffReport, id: EntityId, difference: Difference| {
        report.total += 1;
        if report.first.len() < limit {
            report.first.push(EntityDiff { id, difference });
        }
    };
    let (mut l, mut r) = (left.iter().peekable(), right.iter().peekable());
    loop {
        match (l.peek(), r.peek()) {
            (None, None) => break,
            (Some(a), None) => {
                push(&mut report, a.id, Difference::OnlyLeft((*a).clone()));
                l.next();
            }
            (None, Some(b)) => {
                push(&mut report, b.id, Difference::OnlyRight((*b).clone()));
                r.next();
            }
            (Some(a), Some(b)) => match a.id.cmp(&b.id) {
                Ordering::Less => {
                    push(&mut report, a.id, Difference::OnlyLeft((*a).clone()));
                    l.next();
                }
                Ordering::Greater => {
                    push(&mut report, b.id, Difference::OnlyRight((*b).clone()));
                    r.next();
                }
                Ordering::Equal => {
                    if a != b {
                        let d = Difference::Changed { left: (*a).clone(), right: (*b).clone() };
                        push(&mut report, a.id, d);
                    }
                    l.next();
                    r.next();
                }
            },
        }
    }
    report
}

/// Compares two exports (for example a snapshot body and a replayed state's export). Each must
/// import cleanly; the error says which side did not.
pub fn diff_exports(left: &[u8], right: &[u8], limit: usize) -> Result<DiffReport, String> {
    let l = Catalog::import_bytes(left).map_err(|e| format!("the left export: {e}"))?;
    let r = Catalog::import_bytes(right).map_err(|e| format!("the right export: {e}"))?;
    Ok(diff(&l, &r, limit))
}
