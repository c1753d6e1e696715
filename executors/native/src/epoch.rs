//! The lease epoch: the server's run_id, read once at load, stamped on leases and compared by SWEEP.

use std::sync::OnceLock;

use valkey_module::{Context, ValkeyError};

use crate::errors;

static RUN_ID: OnceLock<Vec<u8>> = OnceLock::new();

/// Reads `run_id` of INFO server once, at module load; a restart gives a new one, which is what
/// lets SWEEP tell a restart's expiry from a worker's stall. False when it cannot be read.
pub fn load(ctx: &Context) -> bool {
    let info = ctx.server_info("server");
    match info.field("run_id") {
        Some(id) if !id.as_slice().is_empty() => {
            let bytes = id.as_slice().to_vec();
            RUN_ID.set(bytes).is_ok() || RUN_ID.get().is_some()
        }
        _ => false,
    }
}

/// The epoch this process stamps; an error reply (not a panic) if load never stored it.
pub fn current() -> Result<&'static [u8], ValkeyError> {
    RUN_ID
        .get()
        .map(Vec::as_slice)
        .ok_or_else(errors::host_reply)
}

/// Pure: an expired lease is restart-caused (exempt from the stall count) when its
/// `lease_epoch` is missing or differs from the current run_id.
pub fn exempt(lease_epoch: Option<&[u8]>, current: &[u8]) -> bool {
    lease_epoch != Some(current)
}

#[cfg(test)]
mod tests {
    use super::exempt;

    #[test]
    fn only_the_current_epoch_is_counted() {
        assert!(!exempt(Some(b"r1"), b"r1"));
        assert!(exempt(Some(b"r0"), b"r1"));
        assert!(exempt(None, b"r1"));
        assert!(exempt(Some(b""), b"r1"));
        assert!(exempt(Some(b"r1 "), b"r1"));
    }
}
