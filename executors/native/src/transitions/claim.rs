//! EMQ.CLAIM 3 pending active base lease_ms: the seed's native claim, the pause read folded in.

use valkey_module::{Context, ValkeyError, ValkeyResult, ValkeyValue};

use super::{arg, gates, key};
use crate::args::duration_arg;
use crate::decide::FirstWrite;
use crate::decide::{deadline, next_attempt};
use crate::epoch;
use crate::errors::{self, emq};
use crate::host::{self, Access, Caller, Reply};
use crate::plan::{num, op, Expect};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["pending", "active", ""], 1)?;
    let lease = duration_arg(arg(&c, 0)?, 1).map_err(emq)?;
    let caller = Caller::of(ctx);
    let (pending, active) = (key(&c, 0)?, key(&c, 1)?);
    let empty = || Ok(ValkeyValue::Array(Vec::new()));

    // Step 1, the pause read: any non-nil `paused` answers empty, "0" and "" included, as the
    // host's paused? reads it. A wrong-typed meta is that error (D2), nothing written.
    let meta = c.q.meta();
    caller.open(ctx, &meta, Access::Read)?;
    if host::read(ctx, "HGET", &[&meta, b"paused"])? != Reply::Null {
        return empty();
    }
    // the script's first write is its ZPOPMIN (not deny-oom), on an empty pending too
    host::first_write(ctx, FirstWrite::Plain, &c.q, None)?;

    // Step 2, peeked: the member ZPOPMIN would pop (same order). A wrong-typed pending answers
    // WRONGTYPE here as the script's ZPOPMIN does, before any write.
    let id = match host::read(ctx, "ZRANGE", &[pending, b"0", b"0"])? {
        Reply::Array(head) => match head.into_iter().next() {
            None => return empty(),
            Some(Reply::Bulk(id)) => id,
            Some(_) => return Err(errors::host_reply()),
        },
        _ => return Err(errors::host_reply()),
    };
    let row = c.q.job(&id);
    // the script's EXISTS: any permission on the row (its key spec asks for no read)
    caller.open(ctx, &row, Access::Exists)?;

    // Step 3, every check before the pop: a ghost is popped and answers empty; a real row must be
    // a hash whose attempts HINCRBY accepts (D3, D4), and active must take a ZADD (D5).
    let ghost = match host::key_type(ctx, &row)?.as_slice() {
        b"none" => true,
        b"hash" => false,
        _ => return Err(ValkeyError::WrongType),
    };
    let mut plan = vec![op("ZPOPMIN", &[pending], Expect::Popped(id.clone()))];
    if ghost {
        host::apply(ctx, &plan)?;
        return empty();
    }
    // the script's HINCRBY of attempts: read and write
    caller.open(ctx, &row, Access::ReadWrite)?;
    let att = match host::read(ctx, "HGET", &[&row, b"attempts"])? {
        Reply::Null => next_attempt(None),
        Reply::Bulk(b) => next_attempt(Some(&b)),
        _ => return Err(errors::host_reply()),
    }
    .map_err(emq)?;
    host::expect_type(ctx, active, b"zset")?;
    let at = deadline(host::now_ms()?, lease).map_err(emq)?;
    let run_id = epoch::current()?;

    // every check passed: the pop, the increment (verified against the prediction), the state
    // with the one native field, the lease
    plan.extend([
        op("HINCRBY", &[&row, b"attempts", b"1"], Expect::Int(att)),
        op(
            "HSET",
            &[&row, b"state", b"active", b"lease_epoch", run_id],
            Expect::AnyInt,
        ),
        op("ZADD", &[active, &num(at), &id], Expect::AnyInt),
    ]);
    host::apply(ctx, &plan)?;
    let payload = match host::read(ctx, "HGET", &[&row, b"payload"])? {
        Reply::Bulk(p) => ValkeyValue::StringBuffer(p),
        Reply::Null => ValkeyValue::Null,
        _ => return Err(errors::host_reply()),
    };
    // the script's reply shape: id, payload (or nil), attempts
    Ok(ValkeyValue::Array(vec![
        host::bulk(&id),
        payload,
        ValkeyValue::Integer(att),
    ]))
}
