//! DIFFTEST.WALK: the replay's canonical keyspace walk in native code, the Lua walker's reply exactly.
//!
//! The replay walks both keyspaces after every step. The Lua walker (difftest/spec/snapshot.py,
//! CANONICAL_WALK_SCRIPT) costs the server about 8 µs a key (three commands a key through the
//! scripting bridge, Lua tables, a sort, cmsgpack); this command reads the keys through the module
//! API's low-level calls and answers the same reply: two bulk strings, MessagePack, the first a list
//! of [key, type, value, pttl] sorted by key (a hash's fields sorted, `lease_epoch` lifted out; a
//! set sorted; a zset and a list as ZRANGE WITHSCORES and LRANGE give them), the second the flat
//! list of (row, lease_epoch); a third only when a database other than the caller's holds keys: each
//! such key as [db, key, type, value, pttl] (`lease_epoch` left in the value), by database and key,
//! the caller's database selected again before the reply. It is the instrument, loaded beside whatever a server runs: it reads,
//! never writes (a key found expired is dropped by the server's own lazy expiry, as SCAN does).
//!
//! It runs after every step, so it allocates little: key names are the scan's own module strings,
//! retained (not copied); a hash's or a set's elements are copied into one buffer and sorted as
//! spans of it; entries are packed straight into the reply, into buffers a static keeps from one
//! walk to the next.

mod pack;
mod track;

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, TryLockError};

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{
    raw, valkey_module, Context, Status, ValkeyError, ValkeyResult, ValkeyString, ValkeyValue,
};

use pack::Packer;

const LEASE_EPOCH: &[u8] = b"lease_epoch";
const READ_FLAGS: c_int = (raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH) as c_int;
/// A buffer that grew past this many bytes is let go after its walk (a big keyspace's walk should
/// not hold its memory until the next one); the usual walk's buffers stay well under it.
const KEEP_BYTES: usize = 256 * 1024;

/// A key name: the scan's module string, retained, and its bytes (valid while it is retained).
struct Name {
    string: *mut raw::RedisModuleString,
    data: *const u8,
    len: usize,
}

impl Name {
    /// The name's bytes.
    fn bytes(&self) -> &[u8] {
        if self.data.is_null() {
            &[]
        } else {
            // SAFETY: the string is retained until the walk's `Retained` guard releases it
            unsafe { slice::from_raw_parts(self.data, self.len) }
        }
    }
}

/// The span of one hash field and its value (or a set member and nothing) in `Elements::bytes`.
#[derive(Clone, Copy)]
struct Pair {
    start: usize,
    middle: usize,
    end: usize,
}

/// A hash's or a set's elements, their bytes in one buffer that every key of a walk reuses.
#[derive(Default)]
struct Elements {
    bytes: Vec<u8>,
    pairs: Vec<Pair>,
}

/// What a walk packs: the entries, the epochs and other databases' entries, each a body whose
/// count comes at the end.
#[derive(Default)]
struct Output {
    entries: Packer,
    entry_count: usize,
    epochs: Packer,
    epoch_count: usize,
    others: Packer,
    other_count: usize,
}

/// Every buffer a walk uses, kept from one walk to the next: a walk of a keyspace like the last
/// one allocates none of its own.
#[derive(Default)]
struct Buffers {
    names: Vec<Name>,
    elements: Elements,
    items: Packer, // one key's value, packed before its count is known (a zset's)
    output: Output,
}

// SAFETY: `names` holds server pointers only during a walk (the `Retained` guard empties it before
// the walk ends); between walks the buffers are plain bytes.
unsafe impl Send for Buffers {}

impl Buffers {
    /// No buffers yet (a const, for the static).
    const fn new() -> Self {
        Buffers {
            names: Vec::new(),
            elements: Elements {
                bytes: Vec::new(),
                pairs: Vec::new(),
            },
            items: Packer::new(),
            output: Output {
                entries: Packer::new(),
                entry_count: 0,
                epochs: Packer::new(),
                epoch_count: 0,
                others: Packer::new(),
                other_count: 0,
            },
        }
    }

    /// Lets go of the buffers that grew past `KEEP_BYTES`.
    fn shrink(&mut self) {
        if self.names.capacity() * size_of::<Name>() > KEEP_BYTES {
            self.names = Vec::new();
        }
        if self.elements.bytes.capacity() > KEEP_BYTES {
            self.elements.bytes = Vec::new();
        }
        if self.elements.pairs.capacity() * size_of::<Pair>() > KEEP_BYTES {
            self.elements.pairs = Vec::new();
        }
        self.items.shrink_past(KEEP_BYTES);
        self.output.entries.shrink_past(KEEP_BYTES);
        self.output.epochs.shrink_past(KEEP_BYTES);
        self.output.others.shrink_past(KEEP_BYTES);
    }
}

/// The buffers between walks (commands run on the server's main thread, one at a time).
static BUFFERS: Mutex<Buffers> = Mutex::new(Buffers::new());

/// The walk's key names, each retained until the guard drops (on every path out of the walk).
struct Retained<'a> {
    names: &'a mut Vec<Name>,
    release: unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut raw::RedisModuleString),
}

impl Drop for Retained<'_> {
    /// Releases every retained name.
    fn drop(&mut self) {
        for name in self.names.drain(..) {
            // SAFETY: retained with a null context in `collect_key`, released once here
            unsafe { (self.release)(ptr::null_mut(), name.string) };
        }
    }
}

/// `len` bytes at `data` (none for a null pointer); valid as long as the server keeps them.
unsafe fn borrowed<'a>(data: *const c_char, len: usize) -> &'a [u8] {
    if data.is_null() {
        &[]
    } else {
        slice::from_raw_parts(data as *const u8, len)
    }
}

/// The bytes of a module string (empty for a null pointer), valid while the string lives.
unsafe fn bytes_of<'a>(string: *const raw::RedisModuleString) -> &'a [u8] {
    let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
        return &[];
    };
    if string.is_null() {
        return &[];
    }
    let mut len: usize = 0;
    borrowed(ptr_len(string, &mut len), len)
}

/// The scan's callback: keeps the key's name, retained rather than copied.
unsafe extern "C" fn collect_key(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    _key: *mut raw::RedisModuleKey,
    into: *mut c_void,
) {
    let (Some(retain), false) = (raw::RedisModule_RetainString, name.is_null()) else {
        return; // key_names checked RetainString before scanning
    };
    let names = &mut *(into as *mut Vec<Name>);
    // a null context: the retain is ours to release, whatever the command's context does
    retain(ptr::null_mut(), name);
    let bytes = bytes_of(name);
    names.push(Name {
        string: name,
        data: bytes.as_ptr(),
        len: bytes.len(),
    });
}

/// The key scan's callback: copies a field and its value (a set's member, no value) into the
/// walk's element buffer.
unsafe extern "C" fn collect_element(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    into: *mut c_void,
) {
    let elements = &mut *(into as *mut Elements);
    let start = elements.bytes.len();
    elements.bytes.extend_from_slice(bytes_of(field));
    let middle = elements.bytes.len();
    elements.bytes.extend_from_slice(bytes_of(value));
    let end = elements.bytes.len();
    elements.pairs.push(Pair { start, middle, end });
}

/// The error a server without one of the module API's calls gets.
fn missing(what: &str) -> ValkeyError {
    ValkeyError::String(format!("ERR difftest walker: the server lacks {what}"))
}

/// A scan cursor, one for the whole walk: restarted for each scan rather than made again (the
/// server allocates each), destroyed when dropped.
struct Cursor {
    cursor: *mut raw::RedisModuleScanCursor,
    restart: unsafe extern "C" fn(*mut raw::RedisModuleScanCursor),
    destroy: unsafe extern "C" fn(*mut raw::RedisModuleScanCursor),
}

impl Cursor {
    /// A new cursor, at the start.
    unsafe fn new() -> Result<Self, ValkeyError> {
        let (Some(create), Some(restart), Some(destroy)) = (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_ScanCursorRestart,
            raw::RedisModule_ScanCursorDestroy,
        ) else {
            return Err(missing("the scan cursor API"));
        };
        let cursor = create();
        if cursor.is_null() {
            return Err(ValkeyError::Str(
                "ERR difftest walker: no scan cursor could be made",
            ));
        }
        Ok(Cursor {
            cursor,
            restart,
            destroy,
        })
    }

    /// The cursor, back at the start for a new scan.
    unsafe fn restarted(&self) -> *mut raw::RedisModuleScanCursor {
        (self.restart)(self.cursor);
        self.cursor
    }
}

impl Drop for Cursor {
    /// Destroys the cursor.
    fn drop(&mut self) {
        // SAFETY: made by `Cursor::new`, destroyed once here
        unsafe { (self.destroy)(self.cursor) };
    }
}

/// Every key name, by the module API's SCAN (each key once, whatever rehashing happens), sorted
/// with duplicates after their first.
unsafe fn key_names(
    ctx: *mut raw::RedisModuleCtx,
    cursor: &Cursor,
    names: &mut Vec<Name>,
) -> Result<(), ValkeyError> {
    let (Some(scan), Some(_)) = (raw::RedisModule_Scan, raw::RedisModule_RetainString) else {
        return Err(missing("RedisModule_Scan"));
    };
    let cursor = cursor.restarted();
    while scan(
        ctx,
        cursor,
        Some(collect_key),
        names as *mut Vec<Name> as *mut c_void,
    ) != 0
    {}
    // unstable: equal names are dropped, so their order does not matter (and it needs no buffer)
    names.sort_unstable_by(|a, b| a.bytes().cmp(b.bytes()));
    Ok(())
}

/// A hash's or a set's elements (a set's values empty) into `elements`, by the module API's key
/// scan, sorted by field and then value (the order of a sort of (field, value) byte pairs).
unsafe fn elements(
    key: *mut raw::RedisModuleKey,
    cursor: &Cursor,
    elements: &mut Elements,
) -> Result<(), ValkeyError> {
    let Some(scan) = raw::RedisModule_ScanKey else {
        return Err(missing("RedisModule_ScanKey"));
    };
    elements.bytes.clear();
    elements.pairs.clear();
    let cursor = cursor.restarted();
    while scan(
        key,
        cursor,
        Some(collect_element),
        elements as *mut Elements as *mut c_void,
    ) != 0
    {}
    let Elements { bytes, pairs } = elements;
    let span = |start: usize, end: usize| bytes.get(start..end).unwrap_or_default();
    // unstable: two pairs that compare equal are the same bytes
    pairs.sort_unstable_by(|a, b| {
        (span(a.start, a.middle), span(a.middle, a.end))
            .cmp(&(span(b.start, b.middle), span(b.middle, b.end)))
    });
    Ok(())
}

impl Elements {
    /// A pair's field (a set's member).
    fn field(&self, pair: Pair) -> &[u8] {
        self.bytes.get(pair.start..pair.middle).unwrap_or_default()
    }

    /// A pair's value (empty for a set's member).
    fn value(&self, pair: Pair) -> &[u8] {
        self.bytes.get(pair.middle..pair.end).unwrap_or_default()
    }
}

/// A hash's fields and values into the entry, sorted, its `lease_epoch` into the epochs instead
/// (in the caller's database; another database's entry keeps it: `db` is Some).
unsafe fn pack_hash(
    key: *mut raw::RedisModuleKey,
    cursor: &Cursor,
    name: &[u8],
    db: Option<i64>,
    found: &mut Elements,
    output: &mut Output,
) -> Result<(), ValkeyError> {
    elements(key, cursor, found)?;
    let found = &*found;
    let lift = |pair: Pair| db.is_none() && found.field(pair) == LEASE_EPOCH;
    let epochs = found.pairs.iter().filter(|&&pair| lift(pair)).count();
    let out = if db.is_some() {
        &mut output.others
    } else {
        &mut output.entries
    };
    out.array((found.pairs.len() - epochs) * 2);
    for &pair in &found.pairs {
        if lift(pair) {
            output.epochs.bytes(name);
            output.epochs.bytes(found.value(pair));
            output.epoch_count += 1;
        } else {
            let out = if db.is_some() {
                &mut output.others
            } else {
                &mut output.entries
            };
            out.bytes(found.field(pair));
            out.bytes(found.value(pair));
        }
    }
    Ok(())
}

/// A set's members into the entry, sorted.
unsafe fn pack_set(
    key: *mut raw::RedisModuleKey,
    cursor: &Cursor,
    found: &mut Elements,
    out: &mut Packer,
) -> Result<(), ValkeyError> {
    elements(key, cursor, found)?;
    out.array(found.pairs.len());
    for &pair in &found.pairs {
        out.bytes(found.field(pair));
    }
    Ok(())
}

/// A list's elements into the entry, in order: LRANGE's reply (lists are rare: another writer's
/// corruption).
unsafe fn pack_list(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    out: &mut Packer,
) -> Result<(), ValkeyError> {
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
    let count = length(reply);
    out.array(count);
    for index in 0..count {
        let item = element(reply, index);
        let mut len: usize = 0;
        out.bytes(borrowed(string(item, &mut len), len));
    }
    free(reply);
    Ok(())
}

/// A zset's members into the entry in ZRANGE's order (by score, then by member), each with its
/// score as the server formats a double (`inf` and `-inf` included): ZRANGE WITHSCORES, without
/// the command: each score in the server's own formatting, in a string it allocates; `items` holds
/// the flat list until its count is known.
unsafe fn pack_zset(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleKey,
    items: &mut Packer,
    out: &mut Packer,
) -> Result<(), ValkeyError> {
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
    items.clear();
    let mut count = 0;
    while ended(key) == 0 {
        let mut score: f64 = 0.0;
        let member = current(key, &mut score);
        if member.is_null() {
            break;
        }
        items.bytes(bytes_of(member));
        release(ctx, member);
        let formatted = format(ctx, score);
        items.bytes(bytes_of(formatted));
        release(ctx, formatted);
        count += 2;
        if next(key) == 0 {
            break;
        }
    }
    stop(key);
    out.array(count);
    out.packed(items);
    Ok(())
}

/// TYPE's answer for a key of a type the walker does not read (a stream, a module's type), packed.
unsafe fn pack_type_name(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    out: &mut Packer,
) -> Result<(), ValkeyError> {
    let (Some(call), Some(string), Some(free)) = (
        raw::RedisModule_Call,
        raw::RedisModule_CallReplyStringPtr,
        raw::RedisModule_FreeCallReply,
    ) else {
        return Err(missing("RedisModule_Call"));
    };
    let reply = call(ctx, c"TYPE".as_ptr(), c"sE".as_ptr(), name);
    if reply.is_null() {
        out.bytes(b"none");
        return Ok(());
    }
    let mut len: usize = 0;
    let data = string(reply, &mut len);
    out.bytes(if data.is_null() {
        b"none"
    } else {
        borrowed(data, len)
    });
    free(reply);
    Ok(())
}

/// One key read and packed as [key, type, value, pttl], or [db, key, type, value, pttl] for
/// another database's (`db`; nothing when it is gone: expired now, say). Returns the hash of what
/// it packed for the key (its row and its lifted epoch) and whether the key has a TTL; None when
/// the key is gone.
unsafe fn pack_entry(
    ctx: *mut raw::RedisModuleCtx,
    cursor: &Cursor,
    name: &Name,
    db: Option<i64>,
    found: &mut Elements,
    items: &mut Packer,
    output: &mut Output,
) -> Result<Option<(u64, bool)>, ValkeyError> {
    let (Some(open), Some(close), Some(kind_of), Some(dma), Some(expire)) = (
        raw::RedisModule_OpenKey,
        raw::RedisModule_CloseKey,
        raw::RedisModule_KeyType,
        raw::RedisModule_StringDMA,
        raw::RedisModule_GetExpire,
    ) else {
        return Err(missing("the key API"));
    };
    // opening the key (not the scan's handle) is what drops a key that expired: lazy expiry
    let key = open(ctx, name.string, READ_FLAGS);
    if key.is_null() {
        return Ok(None);
    }
    let kind = kind_of(key) as isize;
    if kind == raw::REDISMODULE_KEYTYPE_EMPTY {
        close(key);
        return Ok(None);
    }
    let row_start = if db.is_some() {
        output.others.len()
    } else {
        output.entries.len()
    };
    let epoch_start = output.epochs.len();
    let out = match db {
        Some(number) => {
            output.others.array(5);
            output.others.integer(number);
            &mut output.others
        }
        None => {
            output.entries.array(4);
            &mut output.entries
        }
    };
    out.bytes(name.bytes());
    let read = match kind {
        raw::REDISMODULE_KEYTYPE_STRING => {
            out.bytes(b"string");
            out.array(1);
            let mut len: usize = 0;
            out.bytes(borrowed(
                dma(key, &mut len, raw::REDISMODULE_READ as c_int),
                len,
            ));
            Ok(())
        }
        raw::REDISMODULE_KEYTYPE_HASH => {
            out.bytes(b"hash");
            pack_hash(key, cursor, name.bytes(), db, found, output)
        }
        raw::REDISMODULE_KEYTYPE_SET => {
            out.bytes(b"set");
            pack_set(key, cursor, found, out)
        }
        raw::REDISMODULE_KEYTYPE_ZSET => {
            out.bytes(b"zset");
            pack_zset(ctx, key, items, out)
        }
        raw::REDISMODULE_KEYTYPE_LIST => {
            out.bytes(b"list");
            pack_list(ctx, name.string, out)
        }
        _ => pack_type_name(ctx, name.string, out).map(|()| out.array(0)), // compared by type only
    };
    let ttl = expire(key);
    close(key);
    read?;
    let pttl = if ttl == raw::REDISMODULE_NO_EXPIRE as i64 {
        -1
    } else {
        ttl
    };
    let row = if db.is_some() {
        output.others.integer(pttl);
        output.other_count += 1;
        output.others.since(row_start)
    } else {
        output.entries.integer(pttl);
        output.entry_count += 1;
        output.entries.since(row_start)
    };
    Ok(Some((
        track::row_hash(row, output.epochs.since(epoch_start)),
        pttl != -1,
    )))
}

/// What a whole walk does with each key it packed: its database, its name, and its row's hash and
/// whether it has a TTL (a plain walk: nothing; a tracked one records it; a check compares it).
type OnRow<'a> = &'a mut dyn FnMut(c_int, &[u8], (u64, bool));

/// The selected database's keys packed, in order (`db`: another than the caller's; `number`: the
/// selected database's number).
#[allow(clippy::too_many_arguments)]
unsafe fn pack_database(
    ctx: *mut raw::RedisModuleCtx,
    cursor: &Cursor,
    db: Option<i64>,
    number: c_int,
    names: &mut Vec<Name>,
    elements: &mut Elements,
    items: &mut Packer,
    output: &mut Output,
    on_row: OnRow,
) -> Result<(), ValkeyError> {
    let Some(release) = raw::RedisModule_FreeString else {
        return Err(missing("RedisModule_FreeString"));
    };
    names.clear();
    let names = Retained { names, release };
    key_names(ctx, cursor, names.names)?;
    let mut previous: Option<&[u8]> = None;
    for name in names.names.iter() {
        if previous == Some(name.bytes()) {
            continue; // the scan reported it twice
        }
        previous = Some(name.bytes());
        if let Some(found) = pack_entry(ctx, cursor, name, db, elements, items, output)? {
            on_row(number, name.bytes(), found);
        }
    }
    Ok(())
}

/// Every database but the caller's that holds keys, packed into `output.others`; the caller's
/// database selected again on every path out (a module's SELECT moves its caller's connection).
unsafe fn pack_other_databases(
    ctx: *mut raw::RedisModuleCtx,
    cursor: &Cursor,
    names: &mut Vec<Name>,
    elements: &mut Elements,
    items: &mut Packer,
    output: &mut Output,
    on_row: OnRow,
) -> Result<(), ValkeyError> {
    let (Some(selected), Some(select), Some(size)) = (
        raw::RedisModule_GetSelectedDb,
        raw::RedisModule_SelectDb,
        raw::RedisModule_DbSize,
    ) else {
        return Err(missing("the database API"));
    };
    let home = selected(ctx);
    let mut result = Ok(());
    let mut db: c_int = 0;
    // SelectDb refuses a number past the server's `databases`: there the walk ends
    while result.is_ok() {
        if db != home {
            if select(ctx, db) != raw::REDISMODULE_OK as c_int {
                break;
            }
            if size(ctx) > 0 {
                result = pack_database(
                    ctx,
                    cursor,
                    Some(i64::from(db)),
                    db,
                    names,
                    elements,
                    items,
                    output,
                    &mut *on_row,
                );
            }
        }
        db += 1;
    }
    select(ctx, home);
    result
}

/// The whole keyspace packed into `buffers` (not yet answered), each key's row given to `on_row`.
unsafe fn pack_whole(
    ctx: *mut raw::RedisModuleCtx,
    buffers: &mut Buffers,
    on_row: OnRow,
) -> Result<(), ValkeyError> {
    let Some(selected) = raw::RedisModule_GetSelectedDb else {
        return Err(missing("the database API"));
    };
    let Buffers {
        names,
        elements,
        items,
        output,
    } = buffers;
    output.start();
    let home = selected(ctx);
    let cursor = Cursor::new()?;
    pack_database(
        ctx, &cursor, None, home, names, elements, items, output, on_row,
    )?;
    pack_other_databases(ctx, &cursor, names, elements, items, output, on_row)
}

impl Output {
    /// Empty bodies for a new walk.
    fn start(&mut self) {
        self.entries.start_body();
        self.entry_count = 0;
        self.epochs.start_body();
        self.epoch_count = 0;
        self.others.start_body();
        self.other_count = 0;
    }
}

/// The packed walk answered: the entries and the epochs as two bulk strings, other databases'
/// entries as a third (when any holds keys, or always: `always_others`), then `gone` (a tracked
/// walk's fourth: the keys it no longer finds).
unsafe fn reply_output(
    ctx: *mut raw::RedisModuleCtx,
    output: &mut Output,
    always_others: bool,
    gone: Option<&[u8]>,
) -> ValkeyResult {
    let (Some(reply_array), Some(reply_string)) = (
        raw::RedisModule_ReplyWithArray,
        raw::RedisModule_ReplyWithStringBuffer,
    ) else {
        return Err(missing("the reply API"));
    };
    let others = always_others || output.other_count > 0;
    let count = 2 + usize::from(others) + usize::from(gone.is_some());
    reply_array(ctx, count as std::ffi::c_long);
    let entries = output.entries.with_array_header(output.entry_count);
    reply_string(ctx, entries.as_ptr() as *const c_char, entries.len());
    let epochs = output.epochs.with_array_header(output.epoch_count * 2);
    reply_string(ctx, epochs.as_ptr() as *const c_char, epochs.len());
    if others {
        let others = output.others.with_array_header(output.other_count);
        reply_string(ctx, others.as_ptr() as *const c_char, others.len());
    }
    if let Some(gone) = gone {
        reply_string(ctx, gone.as_ptr() as *const c_char, gone.len());
    }
    Ok(ValkeyValue::NoReply)
}

/// The plain walk: the whole keyspace, answered (the reply is written only once nothing can fail).
unsafe fn walk_into(ctx: *mut raw::RedisModuleCtx, buffers: &mut Buffers) -> ValkeyResult {
    pack_whole(ctx, buffers, &mut |_, _, _| {})?;
    reply_output(ctx, &mut buffers.output, false, None)
}

/// Whether the keyspace events are ours (the tracked walk answers whole walks without them).
static TRACKING: AtomicBool = AtomicBool::new(false);

/// The reports of the tracked walks, locked.
fn reported() -> std::sync::MutexGuard<'static, Option<track::Reported>> {
    track::REPORTED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `DIFFTEST.WALK SINCE <whole_below>`: the keys written since the last tracked walk, or the whole
/// keyspace (the plain walk's reply, two or three strings) when the events do not say (a flush, a
/// load, a new module, another database selected), when the caller's database holds fewer than
/// `whole_below` keys, or when half of it was written. The tracked reply is four strings: the
/// entries of the written keys that exist and their epochs (the caller's database), other
/// databases' written entries, and the keys gone since they were reported, each as [db, key] (db
/// -1: the caller's). A key with a TTL is read again every time (the frozen clock may have moved
/// past it).
unsafe fn walk_since(
    ctx: *mut raw::RedisModuleCtx,
    buffers: &mut Buffers,
    whole_below: usize,
) -> ValkeyResult {
    let (Some(selected), Some(select), Some(size), Some(create), Some(release)) = (
        raw::RedisModule_GetSelectedDb,
        raw::RedisModule_SelectDb,
        raw::RedisModule_DbSize,
        raw::RedisModule_CreateString,
        raw::RedisModule_FreeString,
    ) else {
        return Err(missing("the database API"));
    };
    let written = track::take_written();
    let home = selected(ctx);
    let mut held = reported();
    let reports = held.get_or_insert_with(track::Reported::default);
    let keys = size(ctx) as usize;
    let pending = written.keys.len() + reports.volatile.len();
    if !TRACKING.load(Ordering::Relaxed)
        || written.everything
        || !reports.valid
        || reports.home != home
        || keys < whole_below
        || pending * 2 >= keys
    {
        reports.rows.clear();
        reports.volatile.clear();
        reports.valid = false;
        pack_whole(ctx, buffers, &mut |db, name, found| {
            reports.record((db, name.to_vec()), Some(found))
        })?;
        reports.valid = true;
        reports.home = home;
        return reply_output(ctx, &mut buffers.output, false, None);
    }
    let mut wanted: Vec<track::Key> = written.keys.into_iter().collect();
    wanted.extend(reports.volatile.iter().cloned());
    // the caller's database first, then the others by number; each by name
    wanted.sort_unstable_by(|a, b| ((a.0 != home), a.0, &a.1).cmp(&((b.0 != home), b.0, &b.1)));
    wanted.dedup();
    let Buffers {
        names,
        elements,
        items,
        output,
    } = buffers;
    output.start();
    let mut gone = Packer::new();
    let mut gone_count = 0;
    gone.start_body();
    let cursor = Cursor::new()?;
    let mut current = home;
    let mut result = Ok(());
    names.clear();
    let names = Retained { names, release };
    for (db, name) in &wanted {
        if *db != current {
            if select(ctx, *db) != raw::REDISMODULE_OK as c_int {
                continue; // a database the server no longer has: nothing to read there
            }
            current = *db;
        }
        let string = create(ptr::null_mut(), name.as_ptr() as *const c_char, name.len());
        if string.is_null() {
            result = Err(ValkeyError::Str(
                "ERR difftest walker: a key name could not be made",
            ));
            break;
        }
        let bytes = bytes_of(string);
        names.names.push(Name {
            string,
            data: bytes.as_ptr(),
            len: bytes.len(),
        });
        let Some(held_name) = names.names.last() else {
            break;
        };
        let other = if *db == home {
            None
        } else {
            Some(i64::from(*db))
        };
        match pack_entry(ctx, &cursor, held_name, other, elements, items, output) {
            Ok(found) => {
                let key = (*db, name.clone());
                if found.is_none() && reports.rows.contains_key(&key) {
                    gone.array(2);
                    gone.integer(if *db == home { -1 } else { i64::from(*db) });
                    gone.bytes(name);
                    gone_count += 1;
                }
                reports.record(key, found);
            }
            Err(failed) => {
                result = Err(failed);
                break;
            }
        }
    }
    select(ctx, home);
    drop(names);
    drop(cursor);
    if let Err(failed) = result {
        reports.valid = false; // what was reported is no longer known: the next walk is whole
        return Err(failed);
    }
    let gone = gone.with_array_header(gone_count).to_vec();
    reply_output(ctx, output, true, Some(&gone))
}

/// `DIFFTEST.WALK VERIFY`: the whole keyspace walked (not answered) and each key's row compared with
/// what the tracked walks last reported of it. Answers the number of keys that differ (changed,
/// appeared or gone with no event to say so; 0 when no tracked walk reported anything yet), then up
/// to `NAMED` of them as database and name.
unsafe fn verify(ctx: *mut raw::RedisModuleCtx, buffers: &mut Buffers) -> ValkeyResult {
    const NAMED: usize = 8;
    let held = reported();
    let mut differing: Vec<track::Key> = Vec::new();
    let mut count: usize = 0;
    if let Some(reports) = held.as_ref().filter(|reports| reports.valid) {
        let mut seen: usize = 0;
        let mut found_keys: std::collections::HashSet<track::Key> =
            std::collections::HashSet::new();
        pack_whole(ctx, buffers, &mut |db, name, (hash, _)| {
            let key = (db, name.to_vec());
            match reports.rows.get(&key) {
                Some(&reported_hash) => {
                    seen += 1;
                    if reported_hash != hash {
                        count += 1;
                        if differing.len() < NAMED {
                            differing.push(key.clone());
                        }
                    }
                }
                None => {
                    count += 1;
                    if differing.len() < NAMED {
                        differing.push(key.clone());
                    }
                }
            }
            found_keys.insert(key);
        })?;
        if seen < reports.rows.len() {
            for key in reports.rows.keys() {
                if !found_keys.contains(key) {
                    count += 1;
                    if differing.len() < NAMED {
                        differing.push(key.clone());
                    }
                }
            }
        }
    }
    let mut reply: Vec<ValkeyValue> = vec![ValkeyValue::Integer(count as i64)];
    for (db, name) in differing {
        reply.push(ValkeyValue::Integer(i64::from(db)));
        reply.push(ValkeyValue::StringBuffer(name));
    }
    Ok(ValkeyValue::Array(reply))
}

/// The buffers the last walk left (fresh ones should they be in use), given to `body`, shrunk after.
fn with_buffers(body: impl FnOnce(&mut Buffers) -> ValkeyResult) -> ValkeyResult {
    let mut held = match BUFFERS.try_lock() {
        Ok(held) => Some(held),
        // a panic in an earlier walk: its buffers are emptied before use all the same
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    let mut spare = None;
    let buffers = match held.as_mut() {
        Some(held) => &mut **held,
        None => spare.insert(Buffers::default()),
    };
    let result = body(buffers);
    buffers.shrink();
    result
}

/// The walk asked for: plain (no argument), SINCE [whole_below], VERIFY or FORGET.
fn walk(ctx: &Context, args: &[ValkeyString]) -> ValkeyResult {
    let Some(sub) = args.get(1) else {
        return with_buffers(|buffers| unsafe { walk_into(ctx.ctx, buffers) });
    };
    let sub = sub.as_slice().to_ascii_uppercase();
    match sub.as_slice() {
        b"SINCE" => {
            let whole_below = match args.get(2) {
                None => 0,
                Some(given) => std::str::from_utf8(given.as_slice())
                    .ok()
                    .and_then(|text| text.parse::<usize>().ok())
                    .ok_or(ValkeyError::Str(
                        "ERR difftest walker: SINCE takes a key count (a whole walk below it)",
                    ))?,
            };
            with_buffers(|buffers| unsafe { walk_since(ctx.ctx, buffers, whole_below) })
        }
        b"VERIFY" => with_buffers(|buffers| unsafe { verify(ctx.ctx, buffers) }),
        b"FORGET" => {
            track::forget();
            Ok(ValkeyValue::SimpleStringStatic("OK"))
        }
        _ => Err(ValkeyError::Str(
            "ERR difftest walker: use DIFFTEST.WALK [SINCE n | VERIFY | FORGET]",
        )),
    }
}

/// A panic would abort the server: it becomes an error reply (the code above is written not to).
fn difftest_walk(ctx: &Context, args: Vec<ValkeyString>) -> ValkeyResult {
    catch_unwind(AssertUnwindSafe(|| walk(ctx, &args)))
        .unwrap_or_else(|_| Err(ValkeyError::Str("ERR difftest walker: internal error")))
}

/// At load: the keyspace events the tracked walk follows (without them it answers whole walks);
/// with the argument `plant` (tests only), DIFFTEST.PLANT too.
fn init(ctx: &Context, args: &[ValkeyString]) -> Status {
    TRACKING.store(track::subscribe(ctx.ctx), Ordering::Relaxed);
    if args.iter().any(|arg| arg.as_slice() == b"plant") && !track::register_plant(ctx.ctx) {
        return Status::Err;
    }
    Status::Ok
}

// no keys: it reads the whole keyspace, as the Lua walker does through SCAN
valkey_module! {
    name: "difftestwalk",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    init: init,
    commands: [
        ["DIFFTEST.WALK", difftest_walk, "readonly", 0, 0, 0],
    ],
}
