//! The admin requests of a client: a node's metrics, a lookup in its applied state, membership
//! changes (at the leader), the test-only partition switch. Separate from writes (`write.rs`):
//! one call each, never retried.

use super::Client;
use crate::net::wire::{
    EntityView, MembershipChange, MembershipFailure, MembershipView, Msg, NodeMetrics, Reply,
};
use std::io;

impl Client {
    pub async fn metrics(&self, addr: &str) -> io::Result<NodeMetrics> {
        match self.call(addr, &Msg::Metrics).await? {
            Reply::Metrics(m) => Ok(*m),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    pub async fn lookup(
        &self,
        addr: &str,
        parent: Option<u64>,
        name: &str,
    ) -> io::Result<Option<EntityView>> {
        match self.call(addr, &Msg::Lookup { parent, name: name.to_string() }).await? {
            Reply::Lookup(e) => Ok(e),
            Reply::Error(e) => Err(io::Error::other(e)),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// Asks the node at `addr` to change the membership: the membership after it, or why not
    /// (`Ok(Err(..))`). Only the leader changes it ([`Client::membership_at_leader`] finds it).
    /// A call that fails after it was sent may have been carried out: the caller says so.
    pub async fn membership(
        &self,
        addr: &str,
        change: &MembershipChange,
    ) -> io::Result<Result<MembershipView, MembershipFailure>> {
        match self.call(addr, &Msg::Membership(change.clone())).await? {
            Reply::Membership(r) => Ok(r),
            Reply::Error(e) => Ok(Err(MembershipFailure::Refused(e))),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// [`Client::membership`] at the leader among this client's nodes (of the nodes that say
    /// they lead, the one in the highest term). `Err` only when no leader was found (nothing
    /// was sent); a call to the leader that fails or times out is `Indeterminate`.
    pub async fn membership_at_leader(
        &self,
        change: &MembershipChange,
    ) -> io::Result<Result<MembershipView, MembershipFailure>> {
        let mut last = io::Error::other("no node answered");
        let mut leader: Option<(u64, String)> = None;
        for n in self.addrs.clone() {
            match self.metrics(&n).await {
                Ok(m) if m.state == "Leader" && leader.as_ref().is_none_or(|(t, _)| m.term > *t) => {
                    leader = Some((m.term, n))
                }
                Ok(_) => {}
                Err(e) => last = e,
            }
        }
        let Some((_, at)) = leader else {
            return Err(io::Error::other(format!("no leader among the nodes given ({last})")));
        };
        Ok(match self.membership(&at, change).await {
            Ok(r) => r,
            Err(e) => Err(MembershipFailure::Indeterminate(format!("{at}: {e}"))),
        })
    }

    /// The test-only partition switch of the node at `addr`.
    pub async fn partition(&self, addr: &str, on: bool) -> io::Result<()> {
        match self.call(addr, &Msg::Partition { on }).await? {
            Reply::Partition(Ok(_)) => Ok(()),
            Reply::Partition(Err(e)) | Reply::Error(e) => Err(io::Error::other(e)),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }
}
