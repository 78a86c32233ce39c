//! Raft over TCP on loopback (or any address): the frame, the messages, openraft's network.

pub mod append;
pub mod chunks;
pub mod failures;
pub mod frame;
pub mod idle;
pub mod limit;
pub mod transport;
pub mod wire;
