//! EMQ.EXTEND 2 active base id token lease_ms: push a held lease's deadline, re-stamping its epoch.

use valkey_module::{Context, ValkeyResult, ValkeyValue};

use super::{arg, fence, gates, key};
use crate::args::{count_arg, duration_arg};
use crate::decide::deadline;
use crate::decide::FirstWrite;
use crate::epoch;
use crate::errors::emq;
use crate::host::{self, Access, Caller};
use crate::plan::{num, op, Expect};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["active", ""], 3)?;
    let (id, token) = (arg(&c, 0)?, arg(&c, 1)?);
    count_arg(token, 0).map_err(emq)?;
    let lease = duration_arg(arg(&c, 2)?, 1).map_err(emq)?;
    let caller = Caller::of(ctx);
    let active = key(&c, 0)?;
    let row = c.q.job(id);

    if !fence::holds(ctx, &caller, active, &row, id, token)? {
        return Ok(ValkeyValue::Integer(0));
    }
    // the script's first write is ZADD XX active (deny-oom), before the native's row write
    host::first_write(ctx, FirstWrite::DenyOom, &c.q, None)?;
    caller.open(ctx, &row, Access::Write)?;
    let at = deadline(host::now_ms()?, lease).map_err(emq)?;
    let run_id = epoch::current()?;
    let plan = [
        // XX on a present member: an update, no new member
        op("ZADD", &[active, b"XX", &num(at), id], Expect::Int(0)),
        op("HSET", &[&row, b"lease_epoch", run_id], Expect::AnyInt),
    ];
    host::apply(ctx, &plan)?;
    Ok(ValkeyValue::Integer(1))
}
