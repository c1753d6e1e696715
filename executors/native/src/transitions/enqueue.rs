//! EMQ.ENQUEUE 3 pending delayed base id payload delay_ms: add a job once.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use super::{arg, gates, key};
use crate::args::duration_arg;
use crate::decide::deadline;
use crate::decide::FirstWrite;
use crate::errors::{self, emq};
use crate::host::{self, Access, Caller, Reply};
use crate::plan::{num, op, Expect};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["pending", "delayed", ""], 3)?;
    let (id, payload) = (arg(&c, 0)?, arg(&c, 1)?);
    let delay = duration_arg(arg(&c, 2)?, 0).map_err(emq)?;
    let caller = Caller::of(ctx);

    // the script's EXISTS: a row of any type makes it a duplicate
    let row = c.q.job(id);
    caller.open(ctx, &row, Access::Exists)?;
    match host::read(ctx, "EXISTS", &[&row])? {
        Reply::Int(0) => {}
        Reply::Int(_) => return Ok(ValkeyValue::Integer(0)),
        _ => return Err(errors::host_reply()),
    }

    // the row is absent, so its HSET cannot fail; the one set it joins must take a ZADD (only
    // that set: a delay of 0 never touches delayed, and the reverse)
    // the script's first write is the row's HSET (deny-oom): the memory limit, then its ACL check,
    // then a replica's or the server's refusal, in the script runner's order
    host::first_write(ctx, FirstWrite::DenyOom, &c.q, Some((&caller, &row)))?;
    let now = host::now_ms()?;
    let (state, set, score): (&[u8], _, _) = if delay == 0 {
        (b"pending", key(&c, 0)?, now)
    } else {
        (b"delayed", key(&c, 1)?, deadline(now, delay).map_err(emq)?)
    };
    host::expect_type(ctx, set, b"zset")?;

    let now_b = num(now);
    let plan = [
        // a new row: three new fields
        op(
            "HSET",
            &[
                &row,
                b"payload",
                payload,
                b"state",
                state,
                b"enqueued_at",
                &now_b,
            ],
            Expect::Int(3),
        ),
        op("ZADD", &[set, &num(score), id], Expect::AnyInt),
    ];
    host::apply(ctx, &plan)?;
    Ok(ValkeyValue::Integer(1))
}
