// DIFFTEST.WALK: the replay's canonical keyspace walk in native code, the Lua walker's reply exactly.
//
// The replay walks both keyspaces after every step. The Lua walker (difftest/snapshot.py,
// CANONICAL_WALK_SCRIPT) costs the server about 8 µs a key (three commands a key through the
// scripting bridge, Lua tables, a sort, cmsgpack); this command reads the keys through the module
// API's low-level calls and answers the same reply: two bulk strings, MessagePack, the first a list
// of [key, type, value, pttl] sorted by key (a hash's fields sorted, `lease_epoch` lifted out; a
// set sorted; a zset and a list as ZRANGE WITHSCORES and LRANGE give them), the second the flat
// list of (row, lease_epoch). It is the instrument, loaded beside whatever a server runs: it reads,
// never writes (a key found expired is dropped by the server's own lazy expiry, as SCAN does).

mod pack;

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::slice;

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{
    raw, valkey_module, Context, ValkeyError, ValkeyResult, ValkeyString, ValkeyValue,
};

use pack::Packer;

const LEASE_EPOCH: &[u8] = b"lease_epoch";
const READ_FLAGS: c_int = (raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH) as c_int;

/// One key as the walker reports it.
struct Entry {
    key: Vec<u8>,
    kind: Vec<u8>,
    value: Vec<Vec<u8>>,
    pttl: i64,
}

/// `len` bytes at `data`, copied out (none for a null pointer).
unsafe fn copied(data: *const c_char, len: usize) -> Vec<u8> {
    if data.is_null() {
        Vec::new()
    } else {
        slice::from_raw_parts(data as *const u8, len).to_vec()
    }
}

/// The bytes of a module string (empty for a null pointer).
unsafe fn bytes_of(string: *const raw::RedisModuleString) -> Vec<u8> {
    let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
        return Vec::new();
    };
    if string.is_null() {
        return Vec::new();
    }
    let mut len: usize = 0;
    copied(ptr_len(string, &mut len), len)
}

unsafe extern "C" fn collect_key(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    _key: *mut raw::RedisModuleKey,
    into: *mut c_void,
) {
    let names = &mut *(into as *mut Vec<Vec<u8>>);
    names.push(bytes_of(name));
}

unsafe extern "C" fn collect_element(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    into: *mut c_void,
) {
    let pairs = &mut *(into as *mut Vec<(Vec<u8>, Vec<u8>)>);
    let value = if value.is_null() {
        Vec::new()
    } else {
        bytes_of(value)
    };
    pairs.push((bytes_of(field), value));
}

fn missing(what: &str) -> ValkeyError {
    ValkeyError::String(format!("ERR difftest walker: the server lacks {what}"))
}

/// Every key name, by the module API's SCAN (each key once, whatever rehashing happens).
unsafe fn key_names(ctx: *mut raw::RedisModuleCtx) -> Result<Vec<Vec<u8>>, ValkeyError> {
    let (Some(create), Some(scan), Some(destroy)) = (
        raw::RedisModule_ScanCursorCreate,
        raw::RedisModule_Scan,
        raw::RedisModule_ScanCursorDestroy,
    ) else {
        return Err(missing("RedisModule_Scan"));
    };
    let mut names: Vec<Vec<u8>> = Vec::new();
    let cursor = create();
    while scan(
        ctx,
        cursor,
        Some(collect_key),
        &mut names as *mut Vec<Vec<u8>> as *mut c_void,
    ) != 0
    {}
    destroy(cursor);
    Ok(names)
}

/// A hash's or a set's elements (a set's values empty), by the module API's key scan.
unsafe fn elements(key: *mut raw::RedisModuleKey) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ValkeyError> {
    let (Some(create), Some(scan), Some(destroy)) = (
        raw::RedisModule_ScanCursorCreate,
        raw::RedisModule_ScanKey,
        raw::RedisModule_ScanCursorDestroy,
    ) else {
        return Err(missing("RedisModule_ScanKey"));
    };
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let cursor = create();
    while scan(
        key,
        cursor,
        Some(collect_element),
        &mut pairs as *mut Vec<(Vec<u8>, Vec<u8>)> as *mut c_void,
    ) != 0
    {}
    destroy(cursor);
    Ok(pairs)
}

/// A list's elements in order: LRANGE's reply (lists are rare: another writer's corruption).
unsafe fn list_elements(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
) -> Result<Vec<Vec<u8>>, ValkeyError> {
    let (Some(call), Some(length), Some(element), Some(string), Some(free)) = (
        raw::RedisModule_Call,
        raw::RedisModule_CallReplyLength,
        raw::RedisModule_CallReplyArrayElement,
        raw::RedisModule_CallReplyStringPtr,
        raw::RedisModule_FreeCallReply,
    ) else {
        return Err(missing("RedisModule_Call"));
    };
    // "s": the key as a module string, "c": C strings, "E": an error comes back as a reply
    let reply = call(
        ctx,
        c"LRANGE".as_ptr(),
        c"sccE".as_ptr(),
        name,
        c"0".as_ptr(),
        c"-1".as_ptr(),
    );
    if reply.is_null() {
        return Err(ValkeyError::Str(
            "ERR difftest walker: a range read of a key failed",
        ));
    }
    let mut out = Vec::new();
    for index in 0..length(reply) {
        let item = element(reply, index);
        let mut len: usize = 0;
        out.push(copied(string(item, &mut len), len));
    }
    free(reply);
    Ok(out)
}

/// A zset's members in ZRANGE's order (by score, then by member), each with its score as the
/// server formats a double (`inf` and `-inf` included): ZRANGE WITHSCORES, without the command.
unsafe fn zset_members(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleKey,
) -> Result<Vec<Vec<u8>>, ValkeyError> {
    let (
        Some(first),
        Some(current),
        Some(next),
        Some(ended),
        Some(stop),
        Some(format),
        Some(release),
    ) = (
        raw::RedisModule_ZsetFirstInScoreRange,
        raw::RedisModule_ZsetRangeCurrentElement,
        raw::RedisModule_ZsetRangeNext,
        raw::RedisModule_ZsetRangeEndReached,
        raw::RedisModule_ZsetRangeStop,
        raw::RedisModule_CreateStringFromDouble,
        raw::RedisModule_FreeString,
    )
    else {
        return Err(missing("the zset API"));
    };
    let mut flat = Vec::new();
    if first(
        key,
        raw::REDISMODULE_NEGATIVE_INFINITE,
        raw::REDISMODULE_POSITIVE_INFINITE,
        0,
        0,
    ) != raw::REDISMODULE_OK as c_int
    {
        return Err(ValkeyError::Str(
            "ERR difftest walker: a zset's range could not be read",
        ));
    }
    while ended(key) == 0 {
        let mut score: f64 = 0.0;
        let member = current(key, &mut score);
        if member.is_null() {
            break;
        }
        flat.push(bytes_of(member));
        release(ctx, member);
        let formatted = format(ctx, score);
        flat.push(bytes_of(formatted));
        release(ctx, formatted);
        if next(key) == 0 {
            break;
        }
    }
    stop(key);
    Ok(flat)
}

/// TYPE's answer for a key of a type the walker does not read (a stream, a module's type).
unsafe fn type_name(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
) -> Result<Vec<u8>, ValkeyError> {
    let (Some(call), Some(string), Some(free)) = (
        raw::RedisModule_Call,
        raw::RedisModule_CallReplyStringPtr,
        raw::RedisModule_FreeCallReply,
    ) else {
        return Err(missing("RedisModule_Call"));
    };
    let reply = call(ctx, c"TYPE".as_ptr(), c"sE".as_ptr(), name);
    if reply.is_null() {
        return Ok(b"none".to_vec());
    }
    let mut len: usize = 0;
    let data = string(reply, &mut len);
    let kind = if data.is_null() {
        b"none".to_vec()
    } else {
        slice::from_raw_parts(data as *const u8, len).to_vec()
    };
    free(reply);
    Ok(kind)
}

/// One key read, or None when it is gone (expired now, say).
unsafe fn entry(
    ctx: *mut raw::RedisModuleCtx,
    key_name: Vec<u8>,
    epochs: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Option<Entry>, ValkeyError> {
    let (
        Some(make),
        Some(release),
        Some(open),
        Some(close),
        Some(kind_of),
        Some(dma),
        Some(expire),
    ) = (
        raw::RedisModule_CreateString,
        raw::RedisModule_FreeString,
        raw::RedisModule_OpenKey,
        raw::RedisModule_CloseKey,
        raw::RedisModule_KeyType,
        raw::RedisModule_StringDMA,
        raw::RedisModule_GetExpire,
    )
    else {
        return Err(missing("the key API"));
    };
    let name = make(ctx, key_name.as_ptr() as *const c_char, key_name.len());
    let key = open(ctx, name, READ_FLAGS) as *mut raw::RedisModuleKey;
    let mut result = Ok(None);
    if !key.is_null() {
        let kind = kind_of(key) as isize;
        let read: Result<Option<(Vec<u8>, Vec<Vec<u8>>)>, ValkeyError> = match kind {
            raw::REDISMODULE_KEYTYPE_EMPTY => Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {
                let mut len: usize = 0;
                let value = copied(dma(key, &mut len, raw::REDISMODULE_READ as c_int), len);
                Ok(Some((b"string".to_vec(), vec![value])))
            }
            raw::REDISMODULE_KEYTYPE_HASH => elements(key).map(|mut pairs| {
                pairs.sort();
                let mut flat = Vec::with_capacity(pairs.len() * 2);
                for (field, value) in pairs {
                    if field == LEASE_EPOCH {
                        epochs.push((key_name.clone(), value));
                    } else {
                        flat.push(field);
                        flat.push(value);
                    }
                }
                Some((b"hash".to_vec(), flat))
            }),
            raw::REDISMODULE_KEYTYPE_SET => elements(key).map(|pairs| {
                let mut members: Vec<Vec<u8>> =
                    pairs.into_iter().map(|(member, _)| member).collect();
                members.sort();
                Some((b"set".to_vec(), members))
            }),
            raw::REDISMODULE_KEYTYPE_ZSET => {
                zset_members(ctx, key).map(|flat| Some((b"zset".to_vec(), flat)))
            }
            raw::REDISMODULE_KEYTYPE_LIST => {
                list_elements(ctx, name).map(|flat| Some((b"list".to_vec(), flat)))
            }
            _ => type_name(ctx, name).map(|kind| Some((kind, Vec::new()))), // compared by type only
        };
        let ttl = expire(key);
        close(key);
        result = read.map(|found| {
            found.map(|(kind, value)| Entry {
                key: key_name,
                kind,
                value,
                pttl: if ttl == raw::REDISMODULE_NO_EXPIRE as i64 {
                    -1
                } else {
                    ttl
                },
            })
        });
    }
    release(ctx, name);
    result
}

fn walk(ctx: &Context) -> ValkeyResult {
    let raw_ctx = ctx.ctx;
    let mut names = unsafe { key_names(raw_ctx)? };
    names.sort();
    names.dedup();
    let mut epochs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut entries: Vec<Entry> = Vec::with_capacity(names.len());
    for name in names {
        if let Some(found) = unsafe { entry(raw_ctx, name, &mut epochs)? } {
            entries.push(found);
        }
    }
    let mut out = Packer::default();
    out.array(entries.len());
    for found in &entries {
        out.array(4);
        out.bytes(&found.key);
        out.bytes(&found.kind);
        out.array(found.value.len());
        for item in &found.value {
            out.bytes(item);
        }
        out.integer(found.pttl);
    }
    let mut flat_epochs = Packer::default();
    flat_epochs.array(epochs.len() * 2);
    for (row, epoch) in &epochs {
        flat_epochs.bytes(row);
        flat_epochs.bytes(epoch);
    }
    Ok(ValkeyValue::Array(vec![
        ValkeyValue::StringBuffer(out.finish()),
        ValkeyValue::StringBuffer(flat_epochs.finish()),
    ]))
}

/// A panic would abort the server: it becomes an error reply (the code above is written not to).
fn difftest_walk(ctx: &Context, _args: Vec<ValkeyString>) -> ValkeyResult {
    catch_unwind(AssertUnwindSafe(|| walk(ctx)))
        .unwrap_or_else(|_| Err(ValkeyError::Str("ERR difftest walker: internal error")))
}

// no keys: it reads the whole keyspace, as the Lua walker does through SCAN
valkey_module! {
    name: "difftestwalk",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    commands: [
        ["DIFFTEST.WALK", difftest_walk, "readonly", 0, 0, 0],
    ],
}
