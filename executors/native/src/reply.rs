//! An owned copy of a server reply: what the host's calls answer (src/host.rs) and what a plan's
//! expectations are checked against (src/plan.rs), kept apart so that neither imports the other.

/// An owned copy of a server reply, so decisions never hold the server's reply objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Null,
    Int(i64),
    /// Bulk and status strings alike: raw bytes, never converted to UTF-8.
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    /// Any reply type RESP2 calls do not produce here (maps, doubles, ...).
    Other,
}
