//! EMQ.REVIVE 3 dead pending base id: a dead job back to pending, stall count reset; a ghost is consumed.

use valkey_module::{Context, ValkeyError, ValkeyResult, ValkeyValue};

use super::{arg, gates, key};
use crate::decide::FirstWrite;
use crate::errors;
use crate::host::{self, Access, Caller, Reply};
use crate::plan::{num, op, Expect};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["dead", "pending", ""], 1)?;
    let id = arg(&c, 0)?;
    let caller = Caller::of(ctx);
    let (dead, pending) = (key(&c, 0)?, key(&c, 1)?);

    match host::read(ctx, "ZSCORE", &[dead, id])? {
        Reply::Null => return Ok(ValkeyValue::Integer(0)),
        Reply::Bulk(_) => {}
        _ => return Err(errors::host_reply()),
    }
    // the script's first write is ZREM dead (not deny-oom)
    host::first_write(ctx, FirstWrite::Plain, &c.q, None)?;
    let leave_dead = op("ZREM", &[dead, id], Expect::Int(1));
    let row = c.q.job(id);
    caller.open(ctx, &row, Access::Exists)?;
    let row_type = host::key_type(ctx, &row)?;
    if row_type == b"none" {
        // a ghost: it leaves dead, nothing is minted (docs/contract-decisions.md)
        host::apply(ctx, &[leave_dead])?;
        return Ok(ValkeyValue::Integer(0));
    }
    // the script's order: pending's ZADD (D3), then the row's HSET (ACL, then type: D3)
    host::expect_type(ctx, pending, b"zset")?;
    caller.open(ctx, &row, Access::Write)?;
    if row_type != b"hash" {
        return Err(ValkeyError::WrongType);
    }
    let now = num(host::now_ms()?);
    let plan = [
        leave_dead,
        op("ZADD", &[pending, &now, id], Expect::AnyInt),
        op(
            "HSET",
            &[&row, b"state", b"pending", b"stalled", b"0"],
            Expect::AnyInt,
        ),
    ];
    host::apply(ctx, &plan)?;
    Ok(ValkeyValue::Integer(1))
}
