//! The metrics counters (`metrics:completed`, `metrics:failed`): checked and predicted before a bump.

use valkey_module::{Context, ValkeyError};

use crate::decide::next_attempt;
use crate::errors::{self, emq};
use crate::host::{self, Access, Caller, Reply};
use crate::layout::Queue;

/// Checks `metrics:<which>` for one `HINCRBY count 1` (ACL, type, integer) and predicts its reply.
pub fn metrics_bump(
    ctx: &Context,
    caller: &Caller,
    q: &Queue,
    which: &[u8],
) -> Result<(Vec<u8>, i64), ValkeyError> {
    let metrics = q.metrics(which);
    let stored = metrics_count(ctx, caller, &metrics)?;
    let count = next_attempt(stored.as_deref()).map_err(emq)?;
    Ok((metrics, count))
}

/// ACL (read and write, as HINCRBY), type (a hash or absent), then the stored `count`.
pub fn metrics_count(
    ctx: &Context,
    caller: &Caller,
    metrics: &[u8],
) -> Result<Option<Vec<u8>>, ValkeyError> {
    caller.open(ctx, metrics, Access::ReadWrite)?;
    host::expect_type(ctx, metrics, b"hash")?;
    match host::read(ctx, "HGET", &[metrics, b"count"])? {
        Reply::Null => Ok(None),
        Reply::Bulk(b) => Ok(Some(b)),
        _ => Err(errors::host_reply()),
    }
}
