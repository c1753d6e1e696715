//! The fence of EXTEND, COMPLETE and FAIL: the id is in active and its row's attempts is the token.

use valkey_module::{Context, ValkeyError};

use crate::errors;
use crate::host::{self, Access, Caller, Reply};

/// Reads as the script does, in its order (ZSCORE active id, then HGET row attempts), so a
/// wrong-typed active or row answers the same error; the token is compared as bytes (it is the
/// canonical decimal, and HINCRBY stores one), so a corrupt attempts simply fails the fence.
pub fn holds(
    ctx: &Context,
    caller: &Caller,
    active: &[u8],
    row: &[u8],
    id: &[u8],
    token: &[u8],
) -> Result<bool, ValkeyError> {
    match host::read(ctx, "ZSCORE", &[active, id])? {
        Reply::Null => return Ok(false),
        Reply::Bulk(_) => {}
        _ => return Err(errors::host_reply()),
    }
    caller.open(ctx, row, Access::Read)?;
    match host::read(ctx, "HGET", &[row, b"attempts"])? {
        Reply::Null => Ok(false),
        Reply::Bulk(attempts) => Ok(attempts == token),
        _ => Err(errors::host_reply()),
    }
}
