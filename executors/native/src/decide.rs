//! Pure decisions, taken from values already read and before any write: counters, the FAIL
//! comparison, deadlines, and each swept member's verdict.

use crate::args::string2ll;
use crate::epoch;
use crate::errors::{NOTINT, OVERFLOW};

/// What `HINCRBY <row> <field> 1` will reply, decided before any write: Valkey's own integer
/// rules on the stored value (absent counts as 0). Used for attempts, stalled and metrics counts.
pub fn next_attempt(stored: Option<&[u8]>) -> Result<i64, &'static str> {
    match stored {
        None => Ok(1),
        Some(raw) => string2ll(raw).ok_or(NOTINT)?.checked_add(1).ok_or(OVERFLOW),
    }
}

/// The predictions of several HINCRBY by 1 on one counter in one command (a sweep that
/// dead-letters several members bumps metrics:failed once each): the first from the stored
/// value, each next one more, overflow included.
#[derive(Debug, Default)]
pub struct CounterPrediction {
    last: Option<i64>,
}

impl CounterPrediction {
    /// The reply of the next HINCRBY; `stored` is the value read before any write.
    pub fn bump(&mut self, stored: Option<&[u8]>) -> Result<i64, &'static str> {
        let next = match self.last {
            None => next_attempt(stored)?,
            Some(prev) => prev.checked_add(1).ok_or(OVERFLOW)?,
        };
        self.last = Some(next);
        Ok(next)
    }

    /// The first prediction made, if any.
    pub fn is_started(&self) -> bool {
        self.last.is_some()
    }
}

/// FAIL's `attempts ≥ max_attempts` on two canonical non-negative decimals: by length, then
/// lexically. Exact over all of i64, as the script compares them.
pub fn exhausted(attempts: &[u8], max_attempts: &[u8]) -> bool {
    if attempts.len() != max_attempts.len() {
        attempts.len() > max_attempts.len()
    } else {
        attempts >= max_attempts
    }
}

/// A lease or due time: now + duration. Both are below 2^52 by the argument rules, so this never
/// overflows; the check is there so that no input can make it wrap.
pub fn deadline(now: i64, duration: i64) -> Result<i64, &'static str> {
    now.checked_add(duration).ok_or(OVERFLOW)
}

/// One swept member's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swept {
    /// No row: it leaves active and goes nowhere.
    Ghost,
    /// Restart-caused expiry: back to pending, `stalled` unchanged.
    Exempt,
    /// Counted, below the threshold: back to pending with `stalled` = the value.
    Recover(i64),
    /// Counted, at or over the threshold: dead-lettered with `stalled` = the value.
    Die(i64),
}

/// Why a sweep refuses as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepRefusal {
    /// The row exists but is not a hash.
    WrongType,
    /// The row has a `group` field (a lane this sweep does not own).
    Lane,
    /// `stalled` is not an integer, or +1 overflows: the error text.
    Counter(&'static str),
}

/// The next read a member's verdict needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberRead {
    /// TYPE of the row.
    Type,
    /// HEXISTS row group.
    Group,
    /// HGET row lease_epoch.
    Epoch,
    /// HGET row stalled.
    Stalled,
}

/// A decision that either needs one more read or is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<N, D> {
    Need(N),
    Done(D),
}

/// What has been read of one member so far; None = not read yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberSeen {
    pub row_type: Option<Vec<u8>>,
    pub group: Option<bool>,
    pub epoch: Option<Option<Vec<u8>>>,
    pub stalled: Option<Option<Vec<u8>>>,
}

/// Pure: one selected member's verdict against the current run_id and max_stalled, or the next
/// read it needs. A ghost never reads `group`; an exempt member never reads `stalled`.
pub fn decide_member(
    run_id: &[u8],
    max_stalled: i64,
    seen: &MemberSeen,
) -> Step<MemberRead, Result<Swept, SweepRefusal>> {
    let Some(row_type) = &seen.row_type else {
        return Step::Need(MemberRead::Type);
    };
    match row_type.as_slice() {
        b"none" => return Step::Done(Ok(Swept::Ghost)),
        b"hash" => {}
        _ => return Step::Done(Err(SweepRefusal::WrongType)),
    }
    let Some(group) = seen.group else {
        return Step::Need(MemberRead::Group);
    };
    if group {
        return Step::Done(Err(SweepRefusal::Lane));
    }
    let Some(lease_epoch) = &seen.epoch else {
        return Step::Need(MemberRead::Epoch);
    };
    // a missing or foreign lease_epoch is a restart's expiry, not a worker's stall
    if epoch::exempt(lease_epoch.as_deref(), run_id) {
        return Step::Done(Ok(Swept::Exempt));
    }
    let Some(stalled) = &seen.stalled else {
        return Step::Need(MemberRead::Stalled);
    };
    // the counted path: stalled + 1, predicted with the same integer rules as attempts
    Step::Done(match next_attempt(stalled.as_deref()) {
        Err(reply) => Err(SweepRefusal::Counter(reply)),
        Ok(st) if st >= max_stalled => Ok(Swept::Die(st)),
        Ok(st) => Ok(Swept::Recover(st)),
    })
}

/// The kind of a transition's first write, as the retired script's first write command is
/// flagged: `deny-oom` (HSET, ZADD) or not (ZPOPMIN, ZREM, HDEL). A script without flags is
/// refused at its first write only: on a read-only replica any write, under `maxmemory` a
/// deny-oom one; a script that has written goes on (docs/contract-decisions.md, "The memory limit",
/// "A read-only replica as a call target").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstWrite {
    Plain,
    DenyOom,
}

/// Why the server refuses a transition at its first write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// OOM: used memory is over `maxmemory` and the first write is a deny-oom command
    Oom,
    /// NOPERM: the caller may not write the key of the first write (a derived key: ENQUEUE's row)
    NoPerm,
    /// READONLY: the server is a read-only replica and the caller is not its primary
    ReadOnly,
    /// The server denies every write now, and says why in its own words: NOREPLICAS (fewer good
    /// replicas than `min-replicas-to-write`) or MISCONF (its last save or AOF write failed)
    WritesDenied(Vec<u8>),
}

/// What the server at hand checks at a script's first write, and in which order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtFirstWrite {
    pub first: FirstWrite,
    /// used memory over `maxmemory` (the context flag, as the script runner reads it)
    pub oom: bool,
    /// the caller may not write that write's key (None: a declared key the server checked before)
    pub acl_refused: bool,
    pub read_only_replica: bool,
    /// the server's own text when it denies every write (NOREPLICAS, MISCONF)
    pub writes_denied: Option<Vec<u8>>,
}

/// What the server's script runner decides at a script's first write, as a pure function of the
/// server's state, in the order valkey 9.1's runner checks it (measured: docs/contract-decisions.md,
/// "Two refusals at once"): the memory limit at a deny-oom first write, then the caller's access to
/// the key, then a read-only replica, then a write the server denies whatever it is (MISCONF,
/// NOREPLICAS).
pub fn first_write_refusal(at: AtFirstWrite) -> Option<Refusal> {
    if at.oom && at.first == FirstWrite::DenyOom {
        Some(Refusal::Oom)
    } else if at.acl_refused {
        Some(Refusal::NoPerm)
    } else if at.read_only_replica {
        Some(Refusal::ReadOnly)
    } else {
        at.writes_denied.map(Refusal::WritesDenied)
    }
}

/// Whether the gate must ask the server if it denies writes (a probe call): only when nothing
/// that comes before it in `first_write_refusal`'s order refuses already.
pub fn must_ask_writes_denied(
    first: FirstWrite,
    oom: bool,
    acl_refused: bool,
    read_only_replica: bool,
) -> bool {
    let refused_before = (oom && first == FirstWrite::DenyOom) || acl_refused || read_only_replica;
    !refused_before
}

/// Whether a refused probe write (see `host::writes_denied`) says the server denies writes now:
/// its error text begins with NOREPLICAS or MISCONF. Any other answer (the probe ran, or another
/// error) denies nothing.
pub fn denies_writes(probe_error: &[u8]) -> bool {
    probe_error.starts_with(b"NOREPLICAS ") || probe_error.starts_with(b"MISCONF ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_attempt_follows_hincrby() {
        assert_eq!(next_attempt(None), Ok(1));
        assert_eq!(next_attempt(Some(b"0")), Ok(1));
        assert_eq!(next_attempt(Some(b"41")), Ok(42));
        assert_eq!(next_attempt(Some(b"-5")), Ok(-4));
        assert_eq!(next_attempt(Some(b"9223372036854775806")), Ok(i64::MAX));
        assert_eq!(next_attempt(Some(b"9223372036854775807")), Err(OVERFLOW));
        // HINCRBY calls these "not an integer", out-of-i64 digits included
        for bad in [
            &b""[..],
            b"x",
            b"01",
            b"1.5",
            b" 1",
            b"+1",
            b"-0",
            b"99999999999999999999",
        ] {
            assert_eq!(next_attempt(Some(bad)), Err(NOTINT), "{bad:?}");
        }
    }

    #[test]
    fn counter_prediction_chains_and_overflows() {
        let mut c = CounterPrediction::default();
        assert!(!c.is_started());
        assert_eq!(c.bump(Some(b"7")), Ok(8));
        // later bumps ignore the stored value: they follow the previous prediction
        assert_eq!(c.bump(Some(b"7")), Ok(9));
        assert!(c.is_started());
        let mut c = CounterPrediction::default();
        assert_eq!(c.bump(Some(b"9223372036854775806")), Ok(i64::MAX));
        assert_eq!(c.bump(None), Err(OVERFLOW));
        let mut c = CounterPrediction::default();
        assert_eq!(c.bump(Some(b"nope")), Err(NOTINT));
        let mut c = CounterPrediction::default();
        assert_eq!(c.bump(None), Ok(1));
    }

    #[test]
    fn fail_comparison_by_length_then_bytes() {
        assert!(exhausted(b"3", b"3"));
        assert!(exhausted(b"4", b"3"));
        assert!(!exhausted(b"2", b"3"));
        assert!(exhausted(b"10", b"9"));
        assert!(!exhausted(b"9", b"10"));
        assert!(exhausted(b"9223372036854775807", b"9223372036854775806"));
        assert!(!exhausted(b"9223372036854775806", b"9223372036854775807"));
        assert!(!exhausted(b"0", b"1"));
        // agrees with the numeric comparison on canonical decimals
        for a in [0i64, 1, 2, 9, 10, 11, 99, 100, 12345, i64::MAX] {
            for m in [1i64, 2, 9, 10, 11, 100, 12346, i64::MAX] {
                assert_eq!(
                    exhausted(a.to_string().as_bytes(), m.to_string().as_bytes()),
                    a >= m
                );
            }
        }
    }

    #[test]
    fn deadlines() {
        assert_eq!(deadline(1000, 100), Ok(1100));
        assert_eq!(deadline(1000, 0), Ok(1000));
        let max = crate::args::MAX_DURATION_MS;
        assert_eq!(deadline(max - 1, max), Ok(2 * max - 1));
        assert_eq!(deadline(i64::MAX, 1), Err(OVERFLOW));
    }

    fn seen(
        t: &[u8],
        group: Option<bool>,
        epoch: Option<Option<&[u8]>>,
        stalled: Option<Option<&[u8]>>,
    ) -> MemberSeen {
        MemberSeen {
            row_type: Some(t.to_vec()),
            group,
            epoch: epoch.map(|e| e.map(<[u8]>::to_vec)),
            stalled: stalled.map(|s| s.map(<[u8]>::to_vec)),
        }
    }

    #[test]
    fn member_reads_in_order() {
        let run: &[u8] = b"R1";
        assert_eq!(
            decide_member(run, 3, &MemberSeen::default()),
            Step::Need(MemberRead::Type)
        );
        assert_eq!(
            decide_member(run, 3, &seen(b"hash", None, None, None)),
            Step::Need(MemberRead::Group)
        );
        assert_eq!(
            decide_member(run, 3, &seen(b"hash", Some(false), None, None)),
            Step::Need(MemberRead::Epoch)
        );
        assert_eq!(
            decide_member(run, 3, &seen(b"hash", Some(false), Some(Some(run)), None)),
            Step::Need(MemberRead::Stalled)
        );
    }

    #[test]
    fn member_verdicts() {
        let run: &[u8] = b"R1";
        // a ghost needs nothing past its type
        assert_eq!(
            decide_member(run, 3, &seen(b"none", None, None, None)),
            Step::Done(Ok(Swept::Ghost))
        );
        // exempt: missing or foreign epoch, stalled never read
        assert_eq!(
            decide_member(run, 3, &seen(b"hash", Some(false), Some(None), None)),
            Step::Done(Ok(Swept::Exempt))
        );
        assert_eq!(
            decide_member(run, 3, &seen(b"hash", Some(false), Some(Some(b"R0")), None)),
            Step::Done(Ok(Swept::Exempt))
        );
        let counted = |st: Option<&[u8]>, max| {
            decide_member(
                run,
                max,
                &seen(b"hash", Some(false), Some(Some(run)), Some(st)),
            )
        };
        assert_eq!(counted(None, 3), Step::Done(Ok(Swept::Recover(1))));
        assert_eq!(counted(Some(b"1"), 3), Step::Done(Ok(Swept::Recover(2))));
        assert_eq!(counted(Some(b"2"), 3), Step::Done(Ok(Swept::Die(3))));
        assert_eq!(counted(None, 1), Step::Done(Ok(Swept::Die(1))));
        assert_eq!(counted(Some(b"9"), 3), Step::Done(Ok(Swept::Die(10))));
    }

    #[test]
    fn member_refusals() {
        let run: &[u8] = b"R1";
        for t in [&b"string"[..], b"zset", b"list", b"set", b"stream"] {
            assert_eq!(
                decide_member(run, 3, &seen(t, None, None, None)),
                Step::Done(Err(SweepRefusal::WrongType))
            );
        }
        // a group field refuses even an exempt member: the lane check comes before the epoch
        assert_eq!(
            decide_member(run, 3, &seen(b"hash", Some(true), None, None)),
            Step::Done(Err(SweepRefusal::Lane))
        );
        let counted = |st: &[u8]| {
            decide_member(
                run,
                3,
                &seen(b"hash", Some(false), Some(Some(run)), Some(Some(st))),
            )
        };
        assert_eq!(
            counted(b"x"),
            Step::Done(Err(SweepRefusal::Counter(NOTINT)))
        );
        assert_eq!(
            counted(b"9223372036854775807"),
            Step::Done(Err(SweepRefusal::Counter(OVERFLOW)))
        );
        // a corrupt stalled on an exempt member is never read, so never refused
        assert_eq!(
            decide_member(
                run,
                3,
                &seen(b"hash", Some(false), Some(None), Some(Some(b"x")))
            ),
            Step::Done(Ok(Swept::Exempt))
        );
    }

    #[test]
    fn first_write_refusals() {
        use FirstWrite::{DenyOom, Plain};
        let at = |first, oom, acl_refused, read_only_replica, denied: bool| AtFirstWrite {
            first,
            oom,
            acl_refused,
            read_only_replica,
            writes_denied: denied
                .then(|| b"NOREPLICAS Not enough good replicas to write.".to_vec()),
        };
        let denied =
            || Refusal::WritesDenied(b"NOREPLICAS Not enough good replicas to write.".to_vec());
        // a healthy primary refuses nothing
        assert_eq!(
            first_write_refusal(at(Plain, false, false, false, false)),
            None
        );
        assert_eq!(
            first_write_refusal(at(DenyOom, false, false, false, false)),
            None
        );
        // over the limit: only a deny-oom first write (HSET, ZADD); ZPOPMIN, ZREM, HDEL go on
        assert_eq!(
            first_write_refusal(at(Plain, true, false, false, false)),
            None
        );
        assert_eq!(
            first_write_refusal(at(DenyOom, true, false, false, false)),
            Some(Refusal::Oom)
        );
        // the limit comes first: before the caller's access, a read-only replica, writes denied
        assert_eq!(
            first_write_refusal(at(DenyOom, true, true, true, true)),
            Some(Refusal::Oom)
        );
        assert_eq!(
            first_write_refusal(at(DenyOom, true, false, true, false)),
            Some(Refusal::Oom)
        );
        assert_eq!(
            first_write_refusal(at(DenyOom, true, false, false, true)),
            Some(Refusal::Oom)
        );
        // then the caller's access to the key, before a read-only replica or writes denied
        assert_eq!(
            first_write_refusal(at(Plain, true, true, true, true)),
            Some(Refusal::NoPerm)
        );
        assert_eq!(
            first_write_refusal(at(DenyOom, false, true, false, true)),
            Some(Refusal::NoPerm)
        );
        // then a read-only replica, then writes denied (a replica never lacks replicas)
        assert_eq!(
            first_write_refusal(at(Plain, true, false, true, true)),
            Some(Refusal::ReadOnly)
        );
        assert_eq!(
            first_write_refusal(at(Plain, false, false, false, true)),
            Some(denied())
        );
        assert_eq!(
            first_write_refusal(at(Plain, true, false, false, true)),
            Some(denied())
        );
    }

    #[test]
    fn the_probe_is_asked_only_where_nothing_refuses_before_it() {
        use FirstWrite::{DenyOom, Plain};
        assert!(must_ask_writes_denied(Plain, false, false, false));
        assert!(must_ask_writes_denied(Plain, true, false, false));
        assert!(!must_ask_writes_denied(DenyOom, true, false, false));
        assert!(!must_ask_writes_denied(Plain, false, true, false));
        assert!(!must_ask_writes_denied(Plain, false, false, true));
    }

    #[test]
    fn only_noreplicas_and_misconf_deny_writes() {
        assert!(denies_writes(
            b"NOREPLICAS Not enough good replicas to write."
        ));
        assert!(denies_writes(
            b"MISCONF Errors writing to the AOF file: No space left on device"
        ));
        for other in [
            &b"WRONGTYPE Operation against a key holding the wrong kind of value"[..],
            b"READONLY You can't write against a read only replica.",
            b"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            b"NOREPLICAS",
            b"",
        ] {
            assert!(!denies_writes(other));
        }
    }
}
