//! EMQ.FAIL 4 active delayed dead base id token error max_attempts backoff_ms: retry later or dead-letter.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use super::metrics::metrics_bump;
use super::{arg, fence, gates, key};
use crate::args::{count_arg, duration_arg};
use crate::decide::FirstWrite;
use crate::decide::{deadline, exhausted};
use crate::errors::emq;
use crate::host::{self, Access, Caller};
use crate::plan::{num, op, Expect};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["active", "delayed", "dead", ""], 5)?;
    let (id, token, error, max_attempts) = (arg(&c, 0)?, arg(&c, 1)?, arg(&c, 2)?, arg(&c, 3)?);
    count_arg(token, 0).map_err(emq)?;
    count_arg(max_attempts, 1).map_err(emq)?;
    let backoff = duration_arg(arg(&c, 4)?, 0).map_err(emq)?;
    let caller = Caller::of(ctx);
    let (active, delayed, dead) = (key(&c, 0)?, key(&c, 1)?, key(&c, 2)?);
    let row = c.q.job(id);

    if !fence::holds(ctx, &caller, active, &row, id, token)? {
        return Ok(ValkeyValue::Integer(0));
    }
    // the script's first write is ZREM active (not deny-oom)
    host::first_write(ctx, FirstWrite::Plain, &c.q, None)?;
    // past the fence the stored attempts are the token's bytes: both canonical decimals
    caller.open(ctx, &row, Access::Write)?;
    let leave_active = op("ZREM", &[active, id], Expect::Int(1));
    if exhausted(token, max_attempts) {
        // the script's order: the row's HSET, dead's ZADD (D3), the metrics HINCRBY (D3, D4);
        // delayed is never touched on this path
        host::expect_type(ctx, dead, b"zset")?;
        let (metrics, count) = metrics_bump(ctx, &caller, &c.q, b"failed")?;
        let plan = [
            leave_active,
            op(
                "HSET",
                &[&row, b"state", b"dead", b"last_error", error],
                Expect::AnyInt,
            ),
            op("ZADD", &[dead, b"0", id], Expect::AnyInt),
            op("HINCRBY", &[&metrics, b"count", b"1"], Expect::Int(count)),
        ];
        host::apply(ctx, &plan)?;
        return Ok(host::bulk(b"dead"));
    }
    // the retry path never touches dead or the metrics
    host::expect_type(ctx, delayed, b"zset")?;
    let due = deadline(host::now_ms()?, backoff).map_err(emq)?;
    let plan = [
        leave_active,
        op(
            "HSET",
            &[&row, b"state", b"delayed", b"last_error", error],
            Expect::AnyInt,
        ),
        op("ZADD", &[delayed, &num(due), id], Expect::AnyInt),
    ];
    host::apply(ctx, &plan)?;
    Ok(host::bulk(b"retry"))
}
