//! EMQ.PAUSE / EMQ.RESUME 1 meta: set or clear the pause flag, answering as HSET / HDEL would.

use valkey_module::{Context, ValkeyError, ValkeyResult, ValkeyValue};

use crate::args;
use crate::errors::{self, emq};
use crate::host::{self, Reply};
use crate::layout::Queue;
use crate::plan::{op, Expect};

/// The one declared key, `emq:{q}:meta`, and its queue, after the shape and layout gates.
fn meta<'a>(argv: &[&'a [u8]]) -> Result<(&'a [u8], Queue), ValkeyError> {
    let s = args::shape(argv, 1, 0).map_err(emq)?;
    let key = s.keys.first().copied().ok_or(emq(errors::SHAPE))?;
    let queue = Queue::from_meta(key).ok_or(emq(errors::LAYOUT))?;
    Ok((key, queue))
}

/// Whether `paused` is set; a wrong-typed meta answers WRONGTYPE here, as HSET/HDEL would.
fn paused(ctx: &Context, meta: &[u8]) -> Result<bool, ValkeyError> {
    match host::read(ctx, "HEXISTS", &[meta, b"paused"])? {
        Reply::Int(n) => Ok(n == 1),
        _ => Err(errors::host_reply()),
    }
}

/// HSET meta paused 1: always written (a present flag is rewritten to "1"), 1 when it was absent.
pub fn pause(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    // registered `write deny-oom` as the Lua host's HSET is: the server refuses it before it runs
    // (and refuses a transaction that queues it), wrong-typed meta or not
    let (meta, _) = meta(argv)?;
    let added = i64::from(!paused(ctx, meta)?);
    host::apply(
        ctx,
        &[op("HSET", &[meta, b"paused", b"1"], Expect::Int(added))],
    )?;
    Ok(ValkeyValue::Integer(added))
}

/// HDEL meta paused: 1 when it was set; when it was not, HDEL would change nothing, so nothing
/// is sent.
pub fn resume(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    // registered `write` as the Lua host's HDEL is: the server refuses it on a replica or where it
    // denies writes, before it runs, whatever meta holds
    let (meta, _) = meta(argv)?;
    if !paused(ctx, meta)? {
        return Ok(ValkeyValue::Integer(0));
    }
    host::apply(ctx, &[op("HDEL", &[meta, b"paused"], Expect::Int(1))])?;
    Ok(ValkeyValue::Integer(1))
}
