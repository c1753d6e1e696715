//! EMQ.COMPLETE 3 active done base id token: a lease holder finishes; the job moves to done, counted.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use super::metrics::metrics_bump;
use super::{arg, fence, gates, key};
use crate::args::count_arg;
use crate::decide::FirstWrite;
use crate::errors::emq;
use crate::host::{self, Access, Caller};
use crate::plan::{num, op, Expect};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["active", "done", ""], 2)?;
    let (id, token) = (arg(&c, 0)?, arg(&c, 1)?);
    count_arg(token, 0).map_err(emq)?;
    let caller = Caller::of(ctx);
    let (active, done) = (key(&c, 0)?, key(&c, 1)?);
    let row = c.q.job(id);

    if !fence::holds(ctx, &caller, active, &row, id, token)? {
        return Ok(ValkeyValue::Integer(0));
    }
    // the script's first write is ZREM active (not deny-oom)
    host::first_write(ctx, FirstWrite::Plain, &c.q, None)?;
    // the checks, in the order the script's writes would meet them: the row's HSET, done's
    // ZADD (D3), the metrics HINCRBY (D3, D4)
    caller.open(ctx, &row, Access::Write)?;
    host::expect_type(ctx, done, b"zset")?;
    let (metrics, count) = metrics_bump(ctx, &caller, &c.q, b"completed")?;
    let now = num(host::now_ms()?);
    let plan = [
        op("ZREM", &[active, id], Expect::Int(1)),
        op(
            "HSET",
            &[&row, b"state", b"done", b"finished_at", &now],
            Expect::AnyInt,
        ),
        op("ZADD", &[done, &now, id], Expect::AnyInt),
        op("HINCRBY", &[&metrics, b"count", b"1"], Expect::Int(count)),
    ];
    host::apply(ctx, &plan)?;
    Ok(ValkeyValue::Integer(1))
}
