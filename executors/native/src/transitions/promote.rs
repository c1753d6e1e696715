//! EMQ.PROMOTE 3 delayed pending base limit: due delayed jobs to pending at their due score.

use valkey_module::{Context, ValkeyError, ValkeyResult, ValkeyValue};

use super::{arg, gates, key};
use crate::args::count_arg;
use crate::decide::FirstWrite;
use crate::errors::{self, emq};
use crate::host::{self, Access, Caller, Reply};
use crate::plan::{num, op, Expect, Op};

pub fn run(ctx: &Context, argv: &[&[u8]]) -> ValkeyResult {
    let c = gates(argv, &["delayed", "pending", ""], 1)?;
    let limit = arg(&c, 0)?;
    count_arg(limit, 1).map_err(emq)?;
    let caller = Caller::of(ctx);
    let (delayed, pending) = (key(&c, 0)?, key(&c, 1)?);

    // the script's selection, scores as the strings WITHSCORES gives (moved exactly as stored)
    let now = num(host::now_ms()?);
    let due = match host::read(
        ctx,
        "ZRANGEBYSCORE",
        &[delayed, b"-inf", &now, b"WITHSCORES", b"LIMIT", b"0", limit],
    )? {
        Reply::Array(items) => pairs(items).ok_or_else(errors::host_reply)?,
        _ => return Err(errors::host_reply()),
    };
    if !due.is_empty() {
        // the script's first write is the first due member's ZREM (not deny-oom)
        host::first_write(ctx, FirstWrite::Plain, &c.q, None)?;
    }

    // every member decided before any write, each check where the script's write would meet it:
    // the row's EXISTS (any permission: its key spec asks for no read), pending's ZADD (D3), the row's HSET (ACL write, then D9)
    let mut plan: Vec<Op> = Vec::with_capacity(due.len() * 3);
    let mut pending_checked = false;
    let mut promoted = 0i64;
    for (id, score) in &due {
        plan.push(op("ZREM", &[delayed, id], Expect::Int(1)));
        let row = c.q.job(id);
        caller.open(ctx, &row, Access::Exists)?;
        let row_type = host::key_type(ctx, &row)?;
        if row_type == b"none" {
            // a ghost is dropped: it leaves delayed and goes nowhere
            continue;
        }
        if !pending_checked {
            host::expect_type(ctx, pending, b"zset")?;
            pending_checked = true;
        }
        caller.open(ctx, &row, Access::Write)?;
        if row_type != b"hash" {
            return Err(ValkeyError::WrongType);
        }
        plan.push(op("ZADD", &[pending, score, id], Expect::AnyInt));
        plan.push(op("HSET", &[&row, b"state", b"pending"], Expect::AnyInt));
        promoted += 1;
    }
    host::apply(ctx, &plan)?;
    Ok(ValkeyValue::Integer(promoted))
}

/// [member, score, member, score, ...] as (member, score) pairs; None if not that shape.
fn pairs(items: Vec<Reply>) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let Some(first) = it.next() {
        match (first, it.next()) {
            (Reply::Bulk(id), Some(Reply::Bulk(score))) => out.push((id, score)),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &[u8]) -> Reply {
        Reply::Bulk(s.to_vec())
    }

    #[test]
    fn withscores_pairs() {
        assert_eq!(pairs(vec![]), Some(vec![]));
        assert_eq!(
            pairs(vec![b(b"a"), b(b"1"), b(b"b\0"), b(b"-inf")]),
            Some(vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b\0".to_vec(), b"-inf".to_vec())
            ])
        );
        assert_eq!(pairs(vec![b(b"a")]), None);
        assert_eq!(pairs(vec![b(b"a"), Reply::Int(1)]), None);
        assert_eq!(pairs(vec![Reply::Null, b(b"1"), b(b"a"), b(b"2")]), None);
    }
}
