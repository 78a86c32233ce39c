//! Helpers shared by the catalog's integration tests: commands applied through the one apply
//! seam (`wal_state::Applier`), never by calling the state machine directly.

use catalog::{Catalog, Command, EntityId, EntityKind, Receipt};
use wal::{Epoch, Lsn};
use wal_state::{Applied, Applier, EntryKind, Envelope, Outcome, StateMachine};

/// An applier over a catalog that hands out LSNs 1, 2, 3, … (or any increasing LSNs).
pub struct Harness {
    pub a: Applier<Catalog>,
    pub next: u64,
}

impl Default for Harness {
    fn default() -> Self {
        Harness { a: Applier::new(Catalog::new(), 0), next: 1 }
    }
}

/// The envelope a pipeline would log around a catalog command.
pub fn payload(body: &[u8]) -> Vec<u8> {
    Envelope::encode(EntryKind::Command, None, body)
}

impl Harness {
    pub fn state(&self) -> &Catalog {
        self.a.state()
    }

    /// Applies raw body bytes at the next LSN; the outcome.
    pub fn apply_body(&mut self, body: &[u8]) -> Outcome {
        let lsn = self.next;
        self.next += 1;
        match self.a.apply(Lsn(lsn), Epoch(0), &payload(body)).expect("the seam applies it") {
            Applied::Outcome(o) => o,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Applies a command at the next LSN: the receipt, or the refusal's text.
    pub fn run(&mut self, cmd: Command) -> Result<Receipt, String> {
        match self.apply_body(&cmd.encode()) {
            Outcome::Done(b) => Ok(Receipt::decode(&b).expect("a receipt")),
            Outcome::Refused(why) => Err(why),
        }
    }

    /// Skips LSNs (entries of other state, or gaps a test wants).
    pub fn skip_to(&mut self, lsn: u64) {
        assert!(lsn >= self.next);
        self.next = lsn;
    }

    pub fn create(
        &mut self,
        parent: Option<EntityId>,
        kind: EntityKind,
        name: &str,
    ) -> Result<EntityId, String> {
        self.create_with(parent, kind, name, b"")
    }

    pub fn create_with(
        &mut self,
        parent: Option<EntityId>,
        kind: EntityKind,
        name: &str,
        props: &[u8],
    ) -> Result<EntityId, String> {
        let r = self.run(Command::Create { parent, kind, name: name.into(), props: props.to_vec() })?;
        assert_eq!(r.version, 1);
        Ok(r.id)
    }

    pub fn rename(&mut self, id: EntityId, expected_version: u64, new_name: &str) -> Result<Receipt, String> {
        self.run(Command::Rename { id, expected_version, new_name: new_name.into() })
    }

    pub fn update(&mut self, id: EntityId, expected_version: u64, props: &[u8]) -> Result<Receipt, String> {
        self.run(Command::Update { id, expected_version, props: props.to_vec() })
    }

    pub fn drop_entity(
        &mut self,
        id: EntityId,
        expected_version: Option<u64>,
        cascade: bool,
    ) -> Result<Receipt, String> {
        self.run(Command::Drop { id, expected_version, cascade })
    }

    pub fn digest(&self) -> wal_state::SetDigest {
        self.a.state().digest()
    }
}

/// A deterministic client: from a pseudo-random word and the state it currently sees, the next
/// command (mostly valid, sometimes stale, colliding or aimed at the wrong kind).
pub fn scripted(c: &Catalog, x: u64) -> Command {
    const NAMES: [&str; 4] = ["orders", "users", "events", "tmp"];
    let pick = |salt: u64| -> Option<&catalog::Entity> {
        if c.is_empty() {
            None
        } else {
            c.iter().nth(((x >> salt) % c.len() as u64) as usize)
        }
    };
    let name = NAMES[((x >> 8) % 4) as usize].to_string();
    let stale = (x >> 20).is_multiple_of(8);
    match x % 10 {
        0..=4 => match pick(12) {
            Some(p) if !(x >> 24).is_multiple_of(6) => Command::Create {
                parent: Some(p.id),
                kind: p.kind.child_kind().unwrap_or(EntityKind::Table),
                name,
                props: vec![(x >> 32) as u8; ((x >> 40) % 8) as usize],
            },
            _ => Command::Create { parent: None, kind: EntityKind::Metalake, name, props: vec![] },
        },
        5 | 6 => match pick(12) {
            Some(e) => Command::Update {
                id: e.id,
                expected_version: e.version - stale as u64,
                props: vec![(x >> 32) as u8 % 3],
            },
            None => Command::Update { id: EntityId(1), expected_version: 1, props: vec![] },
        },
        7 => match pick(12) {
            Some(e) => {
                Command::Rename { id: e.id, expected_version: e.version - stale as u64, new_name: name }
            }
            None => Command::Rename { id: EntityId(1), expected_version: 1, new_name: name },
        },
        _ => match pick(12) {
            Some(e) => Command::Drop {
                id: e.id,
                expected_version: Some(e.version),
                cascade: (x >> 16).is_multiple_of(3),
            },
            None => Command::Drop { id: EntityId(1), expected_version: None, cascade: false },
        },
    }
}
