//! Raft over TCP, with mutual TLS or plaintext on loopback: the frame, the messages, who may
//! send which, openraft's network.

pub mod access;
pub mod admission;
pub mod append;
pub mod chunks;
pub mod failures;
pub mod frame;
pub mod idle;
pub mod limit;
pub mod stream;
pub mod tls;
pub mod transport;
pub mod wire;
