//! Adapters to the server: byte-safe calls (reads, replicated writes), ACL checks of derived keys, the clock.

use std::ptr;

use valkey_module::{
    raw, AclPermissions, CallOptionsBuilder, CallReply, CallResult, Context, ContextFlags,
    ValkeyError, ValkeyString, ValkeyValue,
};

use crate::decide::{
    denies_writes, first_write_refusal, must_ask_writes_denied, AtFirstWrite, FirstWrite, Refusal,
};
use crate::errors;
use crate::layout::Queue;
use crate::plan::Op;
// the calls' answers; the transitions name the type through this module, as they call it through it
pub use crate::reply::Reply;

fn own(result: &CallResult<'_>) -> Result<Reply, Vec<u8>> {
    match result {
        Err(e) => Err(e.as_bytes().to_vec()),
        Ok(CallReply::I64(i)) => Ok(Reply::Int(i.to_i64())),
        Ok(CallReply::String(s)) => Ok(Reply::Bulk(s.as_bytes().to_vec())),
        Ok(CallReply::Null(_)) => Ok(Reply::Null),
        Ok(CallReply::Array(a)) => Ok(Reply::Array(
            a.iter()
                .map(|item| own(&item).unwrap_or(Reply::Other))
                .collect(),
        )),
        Ok(_) => Ok(Reply::Other),
    }
}

/// The server's own error text, passed on as the script's `redis.call` would raise it.
fn forwarded(text: &[u8]) -> ValkeyError {
    if text.is_empty() {
        return errors::host_reply();
    }
    ValkeyError::String(String::from_utf8_lossy(text).into_owned())
}

/// One command through `call_ext` (bytes in, bytes out); `replicate` propagates its effect.
fn call(ctx: &Context, cmd: &str, args: &[&[u8]], replicate: bool) -> Result<Reply, Vec<u8>> {
    let mut options = CallOptionsBuilder::new().errors_as_replies();
    if replicate {
        options = options.replicate();
    }
    let result: CallResult<'static> = ctx.call_ext(cmd, &options.build(), args);
    match own(&result) {
        // a NULL call reply (the call itself refused, errno set) is never an expected answer
        Ok(Reply::Other) if matches!(result, Ok(CallReply::Unknown)) => Err(Vec::new()),
        other => other,
    }
}

/// A read: its error reply (WRONGTYPE on a wrong-typed key) is the command's answer, exactly
/// where the script's same read would raise it, before any write.
pub fn read(ctx: &Context, cmd: &str, args: &[&[u8]]) -> Result<Reply, ValkeyError> {
    call(ctx, cmd, args, false).map_err(|e| forwarded(&e))
}

/// `TYPE key` as bytes ("none", "hash", "zset", ...).
pub fn key_type(ctx: &Context, key: &[u8]) -> Result<Vec<u8>, ValkeyError> {
    match read(ctx, "TYPE", &[key])? {
        Reply::Bulk(t) => Ok(t),
        _ => Err(errors::host_reply()),
    }
}

/// A key the plan will write must be absent or of the type the write needs; otherwise the
/// write would fail with WRONGTYPE, so the command answers that now, having written nothing.
pub fn expect_type(ctx: &Context, key: &[u8], want: &[u8]) -> Result<(), ValkeyError> {
    let t = key_type(ctx, key)?;
    if t == b"none" || t == want {
        Ok(())
    } else {
        Err(ValkeyError::WrongType)
    }
}

/// The writes, in order, each replicated as its effect and verified against its prediction.
/// A surprise here is EMQ HOSTREPLY: every refusal the plan could meet was checked before.
pub fn apply(ctx: &Context, plan: &[Op]) -> Result<Vec<Reply>, ValkeyError> {
    let mut replies = Vec::with_capacity(plan.len());
    for op in plan {
        let args: Vec<&[u8]> = op.args.iter().map(Vec::as_slice).collect();
        let reply = call(ctx, op.cmd, &args, true).map_err(|_| errors::host_reply())?;
        if !op.expect.matches(&reply) {
            return Err(errors::host_reply());
        }
        replies.push(reply);
    }
    Ok(replies)
}

/// The gate at the point where the retired script makes its first write: refused as the script
/// would be there (OOM over `maxmemory` when that write is a deny-oom command, NOPERM when the
/// caller may not write that write's derived key, READONLY on a read-only replica, the server's
/// NOREPLICAS or MISCONF), in the script runner's order, nothing written. The commands are
/// registered without `write` and `deny-oom` (as EVAL is), so that the server does not refuse
/// them before they run: a script that writes nothing answers on a replica, and one whose first
/// write is ZREM drains a full queue. `acl` is the caller's check of the first write's key where
/// the server has not checked it (a derived key), None for a declared key. Commands from the
/// primary's link or the AOF are never refused (the server obeys them).
pub fn first_write(
    ctx: &Context,
    first: FirstWrite,
    queue: &Queue,
    acl: Option<(&Caller, &[u8])>,
) -> Result<(), ValkeyError> {
    let flags = ctx.get_flags();
    if flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Ok(());
    }
    let on_replica = flags.contains(ContextFlags::SLAVE);
    let oom = flags.contains(ContextFlags::OOM)
        && !(on_replica && replica_ignores_maxmemory(ctx));
    let acl_refused = match acl {
        Some((caller, key)) => caller.open(ctx, key, Access::Write).is_err(),
        None => false,
    };
    let read_only_replica = flags.contains(ContextFlags::SLAVE | ContextFlags::READONLY);
    let writes_denied = if must_ask_writes_denied(first, oom, acl_refused, read_only_replica) {
        writes_denied(ctx, &queue.key(PROBE_SUFFIX))
    } else {
        None // something earlier refuses: no need to ask
    };
    match first_write_refusal(AtFirstWrite {
        first,
        oom,
        acl_refused,
        read_only_replica,
        writes_denied,
    }) {
        None => Ok(()),
        Some(Refusal::Oom) => Err(errors::emq(errors::OOM)),
        Some(Refusal::NoPerm) => Err(errors::emq(errors::NOPERM)),
        Some(Refusal::ReadOnly) => Err(errors::emq(errors::READONLY)),
        Some(Refusal::WritesDenied(text)) => Err(forwarded(&text)),
    }
}

/// Whether this replica ignores its own `maxmemory` (`replica-ignore-maxmemory yes`, the default):
/// the script runner then never refuses a write for memory (valkey's `isSafeToPerformEvictions`:
/// its pre-command OOM state stays false), while the context's OOM flag still says the memory is
/// over the limit. Asked only on a replica over its limit, so never on a primary's common path.
/// An answer that cannot be read counts as the default (yes).
fn replica_ignores_maxmemory(ctx: &Context) -> bool {
    match call(ctx, "CONFIG", &[b"GET", b"replica-ignore-maxmemory"], false) {
        Ok(Reply::Array(pair)) => !matches!(pair.get(1), Some(Reply::Bulk(value)) if value == b"no"),
        _ => true,
    }
}

/// The probe's key below, in the queue's own slot (a cluster node answers a call for another
/// slot's key with an error, which would hide the server's answer). SETRANGE with an empty value
/// changes no key, whatever it holds: on a missing key it creates none, on a string it writes
/// nothing, on another type it answers WRONGTYPE; nothing is propagated or notified.
const PROBE_SUFFIX: &[u8] = b"probe";

/// Whether the server denies every write now (NOREPLICAS: fewer good replicas than
/// `min-replicas-to-write`; MISCONF: its last RDB save or AOF write failed), in the server's own
/// words. No context flag tells; a write command called in script mode is checked by the server
/// as a script's is, so the gate asks with a write that changes nothing (PROBE_SUFFIX). Measured in
/// docs/contract-decisions.md ("Writes the server denies").
fn writes_denied(ctx: &Context, probe: &[u8]) -> Option<Vec<u8>> {
    let options = CallOptionsBuilder::new().errors_as_replies().script_mode();
    let result: CallResult<'static> =
        ctx.call_ext("SETRANGE", &options.build(), &[probe, b"0", b""]);
    match own(&result) {
        Err(text) if denies_writes(&text) => Some(text),
        _ => None,
    }
}

/// The server's millisecond clock: CachedMicroseconds / 1000, the value TIME reports and the same
/// for the whole command, so it equals the script's `t[1]*1000 + floor(t[2]/1000)`. Read once.
pub fn now_ms() -> Result<i64, ValkeyError> {
    // SAFETY: the pointer is set once by RedisModule_Init before any command runs; copied by value.
    let cached = unsafe { raw::RedisModule_CachedMicroseconds }.ok_or_else(errors::host_reply)?;
    // SAFETY: a plain getter of the server's cached time, callable from a command.
    Ok(unsafe { cached() } / 1000)
}

/// Bytes as a bulk string reply (never UTF-8 converted).
pub fn bulk(bytes: &[u8]) -> ValkeyValue {
    ValkeyValue::StringBuffer(bytes.to_vec())
}

/// What the caller must be allowed on a derived key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// EXISTS, TYPE: the key must match one of the caller's patterns, with any permission (the
    /// server's key spec for EXISTS asks for no read: a write-only caller may run it)
    Exists,
    Read,
    Write,
    ReadWrite,
}

/// The calling user, for the ACL checks of keys derived from the base (rows, meta, metrics),
/// which the server's key positions do not cover. None: no user to check (replication link,
/// AOF loading), where the server applies no ACL either.
pub struct Caller {
    user: Option<ValkeyString>,
}

impl Caller {
    pub fn of(ctx: &Context) -> Caller {
        // on a replica's link or while loading, the client has no user: GetCurrentUserName
        // would dereference NULL
        if ctx
            .get_flags()
            .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
        {
            return Caller { user: None };
        }
        // SAFETY: API pointer set at load; copied by value.
        let Some(current) = (unsafe { raw::RedisModule_GetCurrentUserName }) else {
            return Caller { user: None };
        };
        // SAFETY: the context is this command's; the returned string is ours to free.
        let name = unsafe { current(ctx.get_raw()) };
        if name.is_null() {
            return Caller { user: None };
        }
        Caller {
            user: Some(ValkeyString::from_redis_module_string(
                ptr::null_mut(),
                name,
            )),
        }
    }

    /// Refuses with NOPERM, as a script's `redis.call` on that key would, unless the caller may.
    pub fn open(&self, ctx: &Context, key: &[u8], access: Access) -> Result<(), ValkeyError> {
        let Some(user) = &self.user else {
            return Ok(());
        };
        let perms = match access {
            Access::Exists => AclPermissions::empty(),
            Access::Read => AclPermissions::ACCESS,
            Access::Write => AclPermissions::UPDATE,
            Access::ReadWrite => AclPermissions::ACCESS | AclPermissions::UPDATE,
        };
        let key = ValkeyString::create_from_slice(ptr::null_mut(), key);
        ctx.acl_check_key_permission(user, &key, &perms)
            .map_err(|_| errors::emq(errors::NOPERM))
    }
}
