//! What changed since the last tracked walk: the keys keyspace events named, and what each walk reported.
//!
//! A tracked walk (`DIFFTEST.WALK SINCE`) answers only the keys written since the walk before it,
//! so that a step's walk costs what the step touched, not what the keyspace holds. Which keys were
//! written the server says itself: every command that changes a key fires a keyspace event (a
//! module's subscription receives them all, whatever `notify-keyspace-events` says), expiry and
//! eviction included; a flush, a SWAPDB or a load changes keys without one event a key, and each
//! makes the next walk a whole one. A key with a TTL may vanish on the frozen clock without any
//! command touching it, so each is read again at every tracked walk.
//!
//! Nothing is assumed: each walk keeps a hash of every key's row as it reported it, and
//! `DIFFTEST.WALK VERIFY` walks the whole keyspace and names every key whose row is not what was
//! last reported (a write that fired no event: a module's low-level write that notifies no one).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int};
use std::hash::Hasher;
use std::sync::{Mutex, MutexGuard};

use valkey_module::raw;

/// A key: its database and its name.
pub type Key = (c_int, Vec<u8>);

/// Past this many keys written and not yet walked, the set is let go and the next walk is a whole
/// one (a server whose client never asks a tracked walk, a replica, keeps no growing set).
const MOST_DIRTY: usize = 1 << 20;

/// The keys written since the last tracked walk, as the events named them.
pub struct Written {
    /// A change no key event describes happened (a flush, a SWAPDB, a load), or too many keys.
    pub everything: bool,
    pub keys: HashSet<Key>,
}

/// The events' record: written by the event callbacks, taken (and so emptied) by a tracked walk
/// before it reads any key (its own reads fire events: a key it finds expired is deleted).
static WRITTEN: Mutex<Option<Written>> = Mutex::new(None);

/// The record, locked (a poisoned lock's record is whole: its writers do not panic midway).
fn written() -> MutexGuard<'static, Option<Written>> {
    WRITTEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The record taken, an empty one left in its place.
pub fn take_written() -> Written {
    let fresh = Written {
        everything: false,
        keys: HashSet::new(),
    };
    written().replace(fresh).unwrap_or(Written {
        everything: true, // nothing recorded yet: the module was just loaded
        keys: HashSet::new(),
    })
}

/// Everything changed: the next tracked walk is a whole one.
pub fn forget() {
    *written() = Some(Written {
        everything: true,
        keys: HashSet::new(),
    });
}

/// A key event: the key is written down in its database (the callback's context has it selected).
unsafe extern "C" fn on_key_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    _event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    let (Some(selected), Some(ptr_len)) = (
        raw::RedisModule_GetSelectedDb,
        raw::RedisModule_StringPtrLen,
    ) else {
        forget();
        return raw::REDISMODULE_OK as c_int;
    };
    let mut len: usize = 0;
    let data = ptr_len(key, &mut len);
    let name = if data.is_null() {
        Vec::new()
    } else {
        std::slice::from_raw_parts(data as *const u8, len).to_vec()
    };
    let db = selected(ctx);
    let mut record = written();
    let record = record.get_or_insert_with(|| Written {
        everything: true,
        keys: HashSet::new(),
    });
    if !record.everything {
        record.keys.insert((db, name));
        if record.keys.len() > MOST_DIRTY {
            record.everything = true;
            record.keys = HashSet::new();
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// A flush, a SWAPDB or a load: keys changed that no key event names.
unsafe extern "C" fn on_server_event(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut std::ffi::c_void,
) {
    forget();
}

/// Subscribes to every key event class and to the server events that change keys wholesale;
/// false when the server refuses one (the walker then answers no tracked walk).
pub fn subscribe(ctx: *mut raw::RedisModuleCtx) -> bool {
    let (Some(keys), Some(server)) = (
        unsafe { raw::RedisModule_SubscribeToKeyspaceEvents },
        unsafe { raw::RedisModule_SubscribeToServerEvent },
    ) else {
        return false;
    };
    let classes = (raw::REDISMODULE_NOTIFY_ALL | raw::REDISMODULE_NOTIFY_NEW) as c_int;
    if unsafe { keys(ctx, classes, Some(on_key_event)) } != raw::REDISMODULE_OK as c_int {
        return false;
    }
    for id in [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_LOADING,
    ] {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        if unsafe { server(ctx, event, Some(on_server_event)) } != raw::REDISMODULE_OK as c_int {
            return false;
        }
    }
    forget();
    true
}

/// A row's hash: its packed bytes and its lifted epoch's, as a walk reported them.
pub fn row_hash(row: &[u8], epoch: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(row);
    hasher.write_u8(0xff);
    hasher.write(epoch);
    hasher.finish()
}

/// What the tracked walks reported: each key's row hash, and the keys with a TTL.
#[derive(Default)]
pub struct Reported {
    /// Whether a whole tracked walk reported the keyspace since the module was loaded.
    pub valid: bool,
    /// The database the reports named the caller's (a walk from another is a whole one).
    pub home: c_int,
    pub rows: HashMap<Key, u64>,
    pub volatile: HashSet<Key>,
}

impl Reported {
    /// A key as this walk found it: its row's hash and whether it has a TTL (None: it is gone).
    pub fn record(&mut self, key: Key, found: Option<(u64, bool)>) {
        match found {
            Some((hash, volatile)) => {
                if volatile {
                    self.volatile.insert(key.clone());
                } else {
                    self.volatile.remove(&key);
                }
                self.rows.insert(key, hash);
            }
            None => {
                self.volatile.remove(&key);
                self.rows.remove(&key);
            }
        }
    }
}

/// The reports, kept from one tracked walk to the next (walks run on the main thread, one at a time).
pub static REPORTED: Mutex<Option<Reported>> = Mutex::new(None);

/// `DIFFTEST.PLANT key field value`, registered only when the module is loaded with the argument
/// `plant` (tests): sets a hash field through the module API's low-level write, which fires no
/// keyspace event, the write a tracked walk cannot see and VERIFY must name.
unsafe extern "C" fn plant(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let (Some(open), Some(close), Some(hash_set), Some(reply)) = (
        raw::RedisModule_OpenKey,
        raw::RedisModule_CloseKey,
        raw::RedisModule_HashSet,
        raw::RedisModule_ReplyWithLongLong,
    ) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    if argc != 4 {
        if let Some(error) = raw::RedisModule_ReplyWithError {
            error(ctx, c"ERR usage: DIFFTEST.PLANT key field value".as_ptr());
        }
        return raw::REDISMODULE_OK as c_int;
    }
    let args = std::slice::from_raw_parts(argv, 4);
    let key = open(
        ctx,
        args[1],
        (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int,
    );
    let set = hash_set(
        key,
        raw::REDISMODULE_HASH_NONE as c_int,
        args[2],
        args[3],
        std::ptr::null_mut::<c_char>(),
    );
    close(key);
    reply(ctx, i64::from(set));
    raw::REDISMODULE_OK as c_int
}

/// Registers DIFFTEST.PLANT (see `plant`); false when the server refuses it.
pub fn register_plant(ctx: *mut raw::RedisModuleCtx) -> bool {
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return false;
    };
    unsafe {
        create(
            ctx,
            c"DIFFTEST.PLANT".as_ptr(),
            Some(plant),
            c"write".as_ptr(),
            1,
            1,
            1,
        ) == raw::REDISMODULE_OK as c_int
    }
}
