//! EMQ.SWEEP 4 active pending dead base max_stalled limit: expired leases back to pending or dead,
//! a restart's expiries exempt; every member decided before any write.

use valkey_module::{Context, ValkeyError, ValkeyResult, ValkeyValue};

use super::metrics::metrics_count;
use super::{arg, gates, key};
use crate::args::count_arg;
use crate::decide::{
    decide_member, CounterPrediction, FirstWrite, MemberRead, MemberSeen, Step, SweepRefusal, Swept,
};
use crate::epoch;
use crate::errors::{self, emq};
use crate::host::{self, Access, Caller, Reply};
use crate::layout::Queue;
use crate::plan::{num, op, Expect, Op};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["active", "pending", "dead", ""], 2)?;
    let max_stalled = count_arg(arg(&c, 0)?, 1).map_err(emq)?;
    let limit = arg(&c, 1)?;
    count_arg(limit, 1).map_err(emq)?;
    let caller = Caller::of(ctx);
    let (active, pending, dead) = (key(&c, 0)?, key(&c, 1)?, key(&c, 2)?);

    // the script's selection: expired leases, oldest first, at most limit
    let now = num(host::now_ms()?);
    let expired = match host::read(
        ctx,
        "ZRANGEBYSCORE",
        &[active, b"-inf", &now, b"LIMIT", b"0", limit],
    )? {
        Reply::Array(items) => items
            .into_iter()
            .map(|r| match r {
                Reply::Bulk(id) => Some(id),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(errors::host_reply)?,
        _ => return Err(errors::host_reply()),
    };
    if !expired.is_empty() {
        // the script's first write is the first expired member's ZREM (not deny-oom)
        host::first_write(ctx, FirstWrite::Plain, &c.q, None)?;
    }
    let run_id = epoch::current()?;

    // step 1: each member's verdict, in order, with the checks its writes need where the
    // script's writes would meet them; the first refusal refuses the whole sweep (D8)
    let metrics = c.q.metrics(b"failed");
    let mut members = Vec::with_capacity(expired.len());
    let mut failed = Vec::new();
    let mut counter = CounterPrediction::default();
    let mut metrics_stored: Option<Vec<u8>> = None;
    let (mut pending_checked, mut dead_checked) = (false, false);
    for id in expired {
        let row = c.q.job(&id);
        caller.open(ctx, &row, Access::Exists)?;
        let swept = verdict(ctx, &caller, &row, run_id, max_stalled)?;
        match swept {
            Swept::Ghost => {}
            Swept::Exempt | Swept::Recover(_) => {
                if !pending_checked {
                    host::expect_type(ctx, pending, b"zset")?;
                    pending_checked = true;
                }
            }
            Swept::Die(_) => {
                if !dead_checked {
                    host::expect_type(ctx, dead, b"zset")?;
                    dead_checked = true;
                }
                // one HINCRBY per death: the first from the stored count, each next one more
                if !counter.is_started() {
                    metrics_stored = metrics_count(ctx, &caller, &metrics)?;
                }
                failed.push(counter.bump(metrics_stored.as_deref()).map_err(emq)?);
            }
        }
        members.push((id, swept));
    }

    // step 2: the writes
    let plan = sweep_plan(&c.q, [active, pending, dead], &members, &failed)
        .ok_or_else(errors::host_reply)?;
    host::apply(ctx, &plan)?;
    let count = |f: fn(&Swept) -> bool| {
        ValkeyValue::Integer(members.iter().filter(|(_, s)| f(s)).count() as i64)
    };
    Ok(ValkeyValue::Array(vec![
        count(|s| matches!(s, Swept::Recover(_))),
        count(|s| matches!(s, Swept::Die(_))),
        count(|s| matches!(s, Swept::Ghost)),
        count(|s| matches!(s, Swept::Exempt)),
    ]))
}

/// Drives decide_member through its reads. A row that exists is opened for write (HINCRBY's
/// access) before its type can refuse, as the script's HINCRBY checks the ACL first.
fn verdict(
    ctx: &Context,
    caller: &Caller,
    row: &[u8],
    run_id: &[u8],
    max_stalled: i64,
) -> Result<Swept, ValkeyError> {
    let mut seen = MemberSeen::default();
    // at most one read per field: a bounded loop, whatever decide_member answers
    for _ in 0..5 {
        match decide_member(run_id, max_stalled, &seen) {
            Step::Done(Ok(swept)) => return Ok(swept),
            Step::Done(Err(refusal)) => return Err(refused(refusal)),
            Step::Need(MemberRead::Type) => {
                let t = host::key_type(ctx, row)?;
                if t != b"none" {
                    caller.open(ctx, row, Access::ReadWrite)?;
                }
                seen.row_type = Some(t);
            }
            Step::Need(MemberRead::Group) => {
                seen.group = Some(match host::read(ctx, "HEXISTS", &[row, b"group"])? {
                    Reply::Int(n) => n == 1,
                    _ => return Err(errors::host_reply()),
                });
            }
            Step::Need(MemberRead::Epoch) => seen.epoch = Some(hget(ctx, row, b"lease_epoch")?),
            Step::Need(MemberRead::Stalled) => seen.stalled = Some(hget(ctx, row, b"stalled")?),
        }
    }
    Err(errors::host_reply())
}

fn hget(ctx: &Context, row: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>, ValkeyError> {
    match host::read(ctx, "HGET", &[row, field])? {
        Reply::Null => Ok(None),
        Reply::Bulk(b) => Ok(Some(b)),
        _ => Err(errors::host_reply()),
    }
}

fn refused(refusal: SweepRefusal) -> ValkeyError {
    match refusal {
        SweepRefusal::WrongType => ValkeyError::WrongType,
        SweepRefusal::Lane => emq(errors::LANE),
        SweepRefusal::Counter(text) => emq(text),
    }
}

/// Pure: the writes, per member in selection order; every member leaves active first.
/// `failed` holds the predicted metrics:failed replies, one per Die in order; None if short.
pub fn sweep_plan(
    q: &Queue,
    keys: [&[u8]; 3],
    members: &[(Vec<u8>, Swept)],
    failed: &[i64],
) -> Option<Vec<Op>> {
    let [active, pending, dead] = keys;
    let metrics = q.metrics(b"failed");
    let mut counts = failed.iter();
    let mut plan = Vec::with_capacity(members.len() * 4);
    for (id, swept) in members {
        let row = q.job(id);
        plan.push(op("ZREM", &[active, id], Expect::Int(1)));
        match swept {
            Swept::Ghost => {}
            Swept::Exempt => {
                plan.push(op("ZADD", &[pending, b"0", id], Expect::AnyInt));
                plan.push(op("HSET", &[&row, b"state", b"pending"], Expect::AnyInt));
            }
            // stalled moves by HINCRBY, as the script moves it: the same writes propagated and the
            // same keyspace events (hincrby, then hset), the reply verified against the prediction
            Swept::Recover(st) => {
                plan.push(op("HINCRBY", &[&row, b"stalled", b"1"], Expect::Int(*st)));
                plan.push(op("HSET", &[&row, b"state", b"pending"], Expect::AnyInt));
                plan.push(op("ZADD", &[pending, b"0", id], Expect::AnyInt));
            }
            Swept::Die(st) => {
                plan.push(op("HINCRBY", &[&row, b"stalled", b"1"], Expect::Int(*st)));
                plan.push(op(
                    "HSET",
                    &[&row, b"state", b"dead", b"last_error", b"stalled"],
                    Expect::AnyInt,
                ));
                plan.push(op("ZADD", &[dead, b"0", id], Expect::AnyInt));
                let count = *counts.next()?;
                plan.push(op(
                    "HINCRBY",
                    &[&metrics, b"count", b"1"],
                    Expect::Int(count),
                ));
            }
        }
    }
    // every prediction used, none left over
    counts.next().is_none().then_some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> Queue {
        Queue::from_base(b"emq:{q}:").expect("base")
    }

    const KEYS: [&[u8]; 3] = [b"emq:{q}:active", b"emq:{q}:pending", b"emq:{q}:dead"];

    fn cmds(plan: &[Op]) -> Vec<&str> {
        plan.iter().map(|o| o.cmd).collect()
    }

    #[test]
    fn each_verdict_plans_its_writes() {
        let members = vec![
            (b"g".to_vec(), Swept::Ghost),
            (b"e".to_vec(), Swept::Exempt),
            (b"r".to_vec(), Swept::Recover(2)),
            (b"d".to_vec(), Swept::Die(3)),
        ];
        let plan = sweep_plan(&q(), KEYS, &members, &[7]).expect("plan");
        assert_eq!(
            cmds(&plan),
            vec![
                "ZREM", // g
                "ZREM", "ZADD", "HSET", // e
                "ZREM", "HINCRBY", "HSET", "ZADD", // r
                "ZREM", "HINCRBY", "HSET", "ZADD", "HINCRBY", // d
            ]
        );
        assert_eq!(plan[0], op("ZREM", &[KEYS[0], b"g"], Expect::Int(1)));
        assert_eq!(plan[2], op("ZADD", &[KEYS[1], b"0", b"e"], Expect::AnyInt));
        assert_eq!(
            plan[3],
            op(
                "HSET",
                &[b"emq:{q}:job:e", b"state", b"pending"],
                Expect::AnyInt
            )
        );
        // stalled moves by HINCRBY, verified against the verdict's count (the script's writes)
        assert_eq!(
            plan[5],
            op(
                "HINCRBY",
                &[b"emq:{q}:job:r", b"stalled", b"1"],
                Expect::Int(2)
            )
        );
        assert_eq!(
            plan[6],
            op(
                "HSET",
                &[b"emq:{q}:job:r", b"state", b"pending"],
                Expect::AnyInt
            )
        );
        assert_eq!(
            plan[9],
            op(
                "HINCRBY",
                &[b"emq:{q}:job:d", b"stalled", b"1"],
                Expect::Int(3)
            )
        );
        assert_eq!(
            plan[10],
            op(
                "HSET",
                &[
                    b"emq:{q}:job:d",
                    b"state",
                    b"dead",
                    b"last_error",
                    b"stalled"
                ],
                Expect::AnyInt
            )
        );
        assert_eq!(plan[11], op("ZADD", &[KEYS[2], b"0", b"d"], Expect::AnyInt));
        assert_eq!(
            plan[12],
            op(
                "HINCRBY",
                &[b"emq:{q}:metrics:failed", b"count", b"1"],
                Expect::Int(7)
            )
        );
    }

    #[test]
    fn several_deaths_use_successive_predictions() {
        let members = vec![
            (b"a".to_vec(), Swept::Die(1)),
            (b"b".to_vec(), Swept::Recover(1)),
            (b"c".to_vec(), Swept::Die(5)),
        ];
        let plan = sweep_plan(&q(), KEYS, &members, &[4, 5]).expect("plan");
        let bumps: Vec<&Expect> = plan
            .iter()
            .filter(|o| o.cmd == "HINCRBY" && o.args[0].starts_with(b"emq:{q}:metrics"))
            .map(|o| &o.expect)
            .collect();
        assert_eq!(bumps, vec![&Expect::Int(4), &Expect::Int(5)]);
        // predictions must match the deaths one for one
        assert_eq!(sweep_plan(&q(), KEYS, &members, &[4]), None);
        assert_eq!(sweep_plan(&q(), KEYS, &members, &[4, 5, 6]), None);
    }

    #[test]
    fn an_empty_sweep_writes_nothing() {
        assert_eq!(sweep_plan(&q(), KEYS, &[], &[]), Some(vec![]));
        let ghosts = vec![(b"\0\xff".to_vec(), Swept::Ghost)];
        let plan = sweep_plan(&q(), KEYS, &ghosts, &[]).expect("plan");
        assert_eq!(
            plan,
            vec![op("ZREM", &[KEYS[0], b"\0\xff"], Expect::Int(1))]
        );
    }
}
