//! [`StateMachineStore`]: openraft's `RaftStateMachine` over the one apply seam
//! ([`wal_state::Applier`]) with the reference catalog.
//!
//! - `apply`: a command entry goes through `Applier::apply(index, epoch 0, bytes)`, the same
//!   function a restart replay and `walcheck` use; blank entries only advance the applied log
//!   id; a membership entry is remembered as the last membership; a digest claim entry
//!   (`claims/`) never reaches the seam: it is counted, and when a majority of the voters
//!   agreed on a digest other than this node's own at the claimed index, this node fences
//!   itself and `apply` fails (openraft then stops this node's Raft). After a claim index, the
//!   node's digest there is kept and claimed. Every responder is answered.
//! - The state is transient: at open it is the persisted snapshot's state (or empty), and
//!   openraft re-applies the committed log after it (`StorageHelper::get_initial_state`, which
//!   reads the committed id that [`crate::LogStore`] persists), through the same `apply`.
//! - A snapshot is the apply seam's snapshot encoding (`wal_state::snapshot::encode`: the
//!   catalog's export, the request-id table, digest and checksums), built from a copy taken when
//!   the builder is made (so it never sees a half-applied state), and installed through
//!   `decode`, i.e. the catalog's import, which refuses bytes that do not rebuild the recorded
//!   digest. The current snapshot and its Raft metadata (last log id, last membership) are kept
//!   in one file, `raft-snapshot`, written to a temporary name, synced, renamed, the directory
//!   synced (`crate::durable`); so `applied_state` after a restart is the snapshot's, membership
//!   included.

use crate::claims::{is_claim_index, ClaimStats, Comparer, Outcome as ClaimOutcome};
use crate::{LogId, Request, Response, SnapshotMeta, StoredMembership, TypeConfig};
use catalog::Catalog;
use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::type_config::alias::SnapshotOf;
use openraft::{EntryPayload, OptionalSend};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use wal::{Epoch, Lsn};
use wal_state::{snapshot, Applied, Applier, Outcome};

/// Request ids are remembered for this many indexes after the entry that carried them (client
/// retries within it apply once). Every node and every replay uses the same window.
pub const DEDUPE_WINDOW: u64 = 1 << 16;

/// The snapshot file's name in the state machine's directory.
pub const SNAPSHOT_FILE: &str = "raft-snapshot";
const SNAPSHOT_MAGIC: [u8; 8] = *b"\x89CWRSN\r\n";

/// The snapshot data openraft moves around: the apply seam's snapshot bytes.
pub type SnapshotData = Vec<u8>;

#[derive(Clone, Debug)]
struct Current {
    meta: SnapshotMeta,
    data: SnapshotData,
}

/// openraft's state machine over the apply seam and the catalog.
pub struct StateMachineStore {
    applier: Applier<Catalog>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    current: Arc<Mutex<Option<Current>>>,
    dir: Option<PathBuf>,
    /// Claim indexes are the multiples of this (0: none), `claims/`.
    every: u64,
    /// Where local checkpoints go.
    checkpointer: Option<crate::Checkpointer>,
    /// The online comparison of digest claims (a node's; none in library use).
    online: Option<Online>,
}

/// What a node's state machine needs to claim its digests and compare the claims it applies.
#[derive(Clone, Debug)]
pub struct ClaimConfig {
    /// This node's id (the claims it makes carry it).
    pub node: u64,
    /// Where its claims go: the task that proposes them or sends them to the leader. Full:
    /// the claim is dropped (claims are best effort).
    pub sink: tokio::sync::mpsc::Sender<crate::Claim>,
    pub fence: crate::fence::Fence,
    pub stats: Arc<ClaimStats>,
}

#[derive(Debug)]
struct Online {
    cfg: ClaimConfig,
    comparer: Comparer,
}

impl std::fmt::Debug for StateMachineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachineStore")
            .field("last_applied", &self.last_applied)
            .field("membership", &self.membership)
            .finish_non_exhaustive()
    }
}

/// Builds a snapshot from the copy taken when it was made.
pub struct SnapshotBuilder {
    snap: Result<Current, String>,
    current: Arc<Mutex<Option<Current>>>,
    dir: Option<PathBuf>,
}

impl std::fmt::Debug for SnapshotBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBuilder")
            .field("meta", &self.snap.as_ref().map(|s| &s.meta))
            .finish_non_exhaustive()
    }
}

fn encode_file(c: &Current) -> io::Result<Vec<u8>> {
    let meta = serde_json::to_vec(&c.meta).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(24 + meta.len() + c.data.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&c.data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

fn decode_file(bytes_untrusted: &[u8]) -> io::Result<Current> {
    let bad = |what: &str| crate::codec::invalid(format!("{SNAPSHOT_FILE}: {what}"));
    let Some((body, crc)) = bytes_untrusted.split_last_chunk::<4>() else { return Err(bad("too short")) };
    if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err(bad("checksum mismatch"));
    }
    let Some((magic, rest)) = body.split_first_chunk::<8>() else { return Err(bad("too short")) };
    let Some((len, rest)) = rest.split_first_chunk::<8>() else { return Err(bad("too short")) };
    if *magic != SNAPSHOT_MAGIC {
        return Err(bad("bad magic"));
    }
    let len = u64::from_le_bytes(*len);
    if len > rest.len() as u64 {
        return Err(bad("metadata length past the end"));
    }
    let (meta, data) = rest.split_at(len as usize);
    let meta: SnapshotMeta = serde_json::from_slice(meta).map_err(|e| bad(&format!("metadata: {e}")))?;
    Ok(Current { meta, data: data.to_vec() })
}

/// Writes the snapshot file durably: temporary name, fdatasync, rename, directory fsync.
fn persist(dir: &Path, c: &Current) -> io::Result<()> {
    crate::durable::replace(dir, SNAPSHOT_FILE, &encode_file(c)?).map(|_| ())
}

/// The applier a snapshot's data rebuilds (checksums, versions and digest checked).
fn import(data: &[u8]) -> io::Result<Applier<Catalog>> {
    let (applier, _info) = snapshot::decode::<Catalog>("raft snapshot", data).map_err(io::Error::other)?;
    if applier.dedupe_window() != DEDUPE_WINDOW {
        return Err(io::Error::other(format!(
            "snapshot dedupe window {} differs from {DEDUPE_WINDOW}",
            applier.dedupe_window()
        )));
    }
    Ok(applier)
}

/// The snapshot file in `dir` (a node's `sm/`), if there is one: its Raft metadata and the
/// applier its data rebuilds (checked). For offline checks; reads only.
pub fn read_snapshot_file(dir: &Path) -> io::Result<Option<(SnapshotMeta, Applier<Catalog>)>> {
    match crate::durable::read(dir, SNAPSHOT_FILE)? {
        Some(bytes) => {
            let c = decode_file(&bytes)?;
            Ok(Some((c.meta, import(&c.data)?)))
        }
        None => Ok(None),
    }
}

impl StateMachineStore {
    /// A state machine whose snapshots live in `dir` (created if absent); `None` keeps them in
    /// memory only. Starts from the persisted snapshot, if any.
    pub fn open(dir: Option<&Path>) -> io::Result<StateMachineStore> {
        let mut sm = StateMachineStore {
            applier: Applier::new(Catalog::new(), DEDUPE_WINDOW),
            last_applied: None,
            membership: StoredMembership::default(),
            current: Arc::new(Mutex::new(None)),
            dir: dir.map(Path::to_path_buf),
            every: 0,
            checkpointer: None,
            online: None,
        };
        if let Some(d) = dir {
            wal::storage::create_dir_durable(d)?;
            let _ = fs::remove_file(d.join(format!("{SNAPSHOT_FILE}.tmp")));
            if let Some(bytes) = crate::durable::read(d, SNAPSHOT_FILE)? {
                let c = decode_file(&bytes)?;
                sm.restore(&c)?;
                *sm.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
            }
        }
        Ok(sm)
    }

    fn restore(&mut self, c: &Current) -> io::Result<()> {
        let applier = import(&c.data)?;
        if let (Some(a), Some(l)) = (applier.applied(), c.meta.last_log_id) {
            if a.0 > l.index {
                return Err(io::Error::other(format!("snapshot state applied {a} past its log id {l}")));
            }
        }
        self.applier = applier;
        self.last_applied = c.meta.last_log_id;
        self.membership = c.meta.last_membership.clone();
        Ok(())
    }

    /// Makes every index that is a multiple of `every` a claim index (`claims/`) and records
    /// a checkpoint of the state after it into the log (what [`crate::LogStore::open_verified`]
    /// compares a replay with at the next start), at the last command at or below it. With
    /// [`StateMachineStore::with_claims`] the checkpoint is recorded only once a majority of
    /// the voters confirmed that digest, so a replica whose state went wrong in memory never
    /// writes its wrong digest into its own log (the restart from the log then heals it).
    pub fn with_checkpoints(mut self, to: crate::Checkpointer, every: u64) -> Self {
        self.checkpointer = Some(to);
        self.every = every.max(1);
        self
    }

    /// Claims this node's digest at every claim index (see `with_checkpoints`) and compares
    /// the claims it applies (`claims/`): once a majority of the voters agreed on a digest
    /// that differs from this node's own at that index, the node fences itself (`cfg.fence`)
    /// and its `apply` fails, which stops its Raft.
    pub fn with_claims(mut self, cfg: ClaimConfig) -> Self {
        self.online = Some(Online { comparer: Comparer::new(cfg.node), cfg });
        self
    }

    /// Where a replay of the log starts: the snapshot's applier, the first index after it and
    /// the membership there.
    pub(crate) fn replay_base(&self) -> io::Result<(Applier<Catalog>, u64, crate::Membership)> {
        let cur = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match cur {
            Some(c) => Ok((
                import(&c.data)?,
                c.meta.last_log_id.map_or(0, |l| l.index + 1),
                c.meta.last_membership.membership().clone(),
            )),
            None => Ok((Applier::new(Catalog::new(), DEDUPE_WINDOW), 0, crate::Membership::default())),
        }
    }

    /// Test-only fault (`--allow-faults`, `Msg::Alter`): applies `cmd` to the catalog in memory
    /// only, bypassing the log, as a bit flip in memory or a nondeterministic apply would
    /// change it. The entity it creates gets an id no log index reaches. Returns the last
    /// applied index.
    pub fn alter_for_test(&mut self, cmd: &catalog::Command) -> Result<Option<u64>, String> {
        use wal_state::{Committed, EntryKind, StateMachine};
        let applied = self.applier.applied();
        let body = cmd.encode();
        let fake = Lsn((1 << 48) + applied.map_or(0, |l| l.0));
        let mut cat = self.applier.state().clone();
        let entry =
            Committed { lsn: fake, epoch: Epoch(0), kind: EntryKind::Command, request_id: None, body: &body };
        if let Outcome::Refused(why) = cat.apply(&entry) {
            return Err(format!("the catalog refused the alteration: {why}"));
        }
        let records: Vec<_> = self.applier.dedupe_records().collect();
        self.applier = Applier::from_parts(cat, applied, self.applier.dedupe_window(), records)?;
        Ok(self.last_applied.map(|l| l.index))
    }

    /// Read access to the catalog (queries only).
    pub fn catalog(&self) -> &Catalog {
        self.applier.state()
    }

    /// The last applied log id (blank and membership entries included).
    pub fn last_applied(&self) -> Option<LogId> {
        self.last_applied
    }

    /// The apply seam (digest, checkpoint value, request fates).
    pub fn applier(&self) -> &Applier<Catalog> {
        &self.applier
    }

    /// Applies one entry: THE apply function for commands, the claim comparison for claims,
    /// membership bookkeeping else; then, at a claim index, this node's digest there.
    fn apply_one(&mut self, entry: &crate::Entry) -> io::Result<Response> {
        let index = entry.log_id.index;
        let r = match &entry.payload {
            EntryPayload::Blank => Response::Blank,
            EntryPayload::Membership(m) => {
                self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                Response::Membership
            }
            EntryPayload::Normal(Request::Claim(c)) => {
                self.count_claim(c, index)?;
                Response::Claim
            }
            EntryPayload::Normal(Request::Command(bytes)) => {
                match self.applier.apply(Lsn(index), Epoch(0), bytes) {
                    Ok(Applied::Outcome(Outcome::Done(b))) => Response::Done(b),
                    Ok(Applied::Outcome(Outcome::Refused(why))) => Response::Refused(why),
                    Ok(Applied::Duplicate { first_lsn }) => Response::Duplicate { first_index: first_lsn.0 },
                    Err(why) => {
                        if let Some(f) = self.applier.fenced() {
                            // A panic in apply: the state is fenced; stop this node's Raft.
                            return Err(io::Error::other(format!("state machine fenced: {f}")));
                        }
                        // Bytes the seam refuses (a bad envelope): the same on every replay.
                        Response::Invalid(why)
                    }
                }
            }
        };
        self.last_applied = Some(entry.log_id);
        if is_claim_index(index, self.every) && self.applier.fenced().is_none() {
            self.at_claim_index(index);
        }
        Ok(r)
    }

    /// This node's digest after claim index `index`: claimed (a node), or recorded as a local
    /// checkpoint at once (library use, no claims).
    fn at_claim_index(&mut self, index: u64) {
        let cp = self.applier.checkpoint();
        let lsn = self.applier.applied().map(|l| l.0);
        match &mut self.online {
            Some(o) => {
                o.comparer.own(index, cp, lsn);
                o.cfg.stats.made();
                if o.cfg.sink.try_send(crate::Claim::new(o.cfg.node, index, &cp)).is_err() {
                    o.cfg.stats.dropped();
                }
            }
            None => {
                if let (Some(to), Some(l)) = (&self.checkpointer, lsn) {
                    to.record(l, cp);
                }
            }
        }
    }

    /// Counts a claim applied at index `at`; fences this node when a majority of the voters
    /// agreed on a digest that is not its own.
    fn count_claim(&mut self, c: &crate::Claim, at: u64) -> io::Result<()> {
        let Some(o) = &mut self.online else { return Ok(()) };
        let node = o.cfg.node;
        match o.comparer.claim(c, at, self.membership.membership().get_joint_config()) {
            ClaimOutcome::Nothing => {}
            ClaimOutcome::Confirmed { index, own, lsn } => {
                o.cfg.stats.confirmed(index);
                if let (Some(to), Some(l)) = (&self.checkpointer, lsn) {
                    to.record(l, own);
                }
            }
            ClaimOutcome::Split { index, claims } => {
                o.cfg.stats.split();
                tracing::warn!(
                    node,
                    "DIGEST CLAIMS DISAGREE at index {index} ({claims}): no digest has a majority of the voters so far; a node fences itself only when a majority agrees on a digest other than its own"
                );
            }
            ClaimOutcome::Diverged(d) => {
                let why = d.to_string();
                o.cfg.fence.set(node, why.clone());
                self.applier.fence(why.clone());
                return Err(io::Error::other(format!("this node fenced itself: {why}")));
            }
        }
        Ok(())
    }

    fn snapshot_now(&self) -> io::Result<Current> {
        let data = snapshot::encode(&self.applier, [0; 16])?;
        Ok(Current {
            meta: SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone() },
            data,
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, SnapshotData>, io::Error> {
        let snap = self.snap.as_ref().map_err(|e| io::Error::other(format!("exporting the state: {e}")))?;
        // The file is written under the lock of `current`, as an install writes it: openraft
        // runs a build on its own task, and a build racing an install used to write the one
        // temporary file at once (found by the kill -9 cluster test: the install's rename
        // failed with ENOENT and the node's Raft stopped). Never replace a newer snapshot, on
        // disk or in memory.
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.as_ref().is_none_or(|c| c.meta.last_log_id <= snap.meta.last_log_id) {
            if let Some(d) = &self.dir {
                persist(d, snap)?;
            }
            *cur = Some(snap.clone());
            tracing::info!(
                index = snap.meta.last_log_id.map(|l| l.index),
                bytes = snap.data.len(),
                "snapshot built"
            );
        }
        Ok(SnapshotOf::<TypeConfig, SnapshotData> { meta: snap.meta.clone(), snapshot: snap.data.clone() })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let r = self.apply_one(&entry)?;
            if let Some(responder) = responder {
                responder.send(r);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // A copy now: the build never sees a state that apply changes meanwhile.
        let snap = self.snapshot_now().map_err(|e| e.to_string());
        SnapshotBuilder { snap, current: self.current.clone(), dir: self.dir.clone() }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, data: SnapshotData) -> Result<(), io::Error> {
        let c = Current { meta: meta.clone(), data };
        self.restore(&c)?;
        if let (Some(o), Some(l)) = (&mut self.online, meta.last_log_id) {
            o.comparer.forget_through(l.index);
        }
        // Under the lock a build persists under (see `build_snapshot`).
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = &self.dir {
            persist(d, &c)?;
        }
        tracing::info!(
            index = c.meta.last_log_id.map(|l| l.index),
            bytes = c.data.len(),
            "snapshot installed (sent by the leader)"
        );
        *cur = Some(c);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, SnapshotData>>, io::Error> {
        let cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        Ok(cur.as_ref().map(|c| SnapshotOf::<TypeConfig, SnapshotData> {
            meta: c.meta.clone(),
            snapshot: c.data.clone(),
        }))
    }
}
