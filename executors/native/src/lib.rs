//! The `emq` module: loads the lease epoch and registers one command per EMQ transition.

mod args;
mod decide;
mod epoch;
mod errors;
mod host;
mod layout;
mod plan;
mod reply;
mod transitions;

use std::panic::{catch_unwind, AssertUnwindSafe};

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{valkey_module, Context, Status, ValkeyResult, ValkeyString};

use transitions::{claim, complete, enqueue, extend, fail, pause, promote, revive, sweep};

type Handler = fn(&Context, &[&[u8]]) -> ValkeyResult;

/// Every command enters here: argv as raw bytes, and a panic (which would abort the server)
/// turned into an error reply as a last resort; the handlers are written not to panic.
fn dispatch(ctx: &Context, args: Vec<ValkeyString>, handler: Handler) -> ValkeyResult {
    let argv: Vec<&[u8]> = args.iter().map(ValkeyString::as_slice).collect();
    catch_unwind(AssertUnwindSafe(|| handler(ctx, &argv)))
        .unwrap_or_else(|_| Err(errors::host_reply()))
}

macro_rules! entry {
    ($name:ident, $handler:path) => {
        fn $name(ctx: &Context, args: Vec<ValkeyString>) -> ValkeyResult {
            dispatch(ctx, args, $handler)
        }
    };
}

entry!(emq_enqueue, enqueue::run);
entry!(emq_claim, claim::run);
entry!(emq_extend, extend::run);
entry!(emq_complete, complete::run);
entry!(emq_fail, fail::run);
entry!(emq_promote, promote::run);
entry!(emq_sweep, sweep::run);
entry!(emq_revive, revive::run);
entry!(emq_pause, pause::pause);
entry!(emq_resume, pause::resume);

/// The run_id is read once here: it is the epoch every lease this process grants carries.
fn init(ctx: &Context, _args: &[ValkeyString]) -> Status {
    if epoch::load(ctx) {
        Status::Ok
    } else {
        ctx.log_warning("emq: cannot read run_id from INFO server; not loading");
        Status::Err
    }
}

// Flags: "may-replicate", as EVAL has, not "write deny-oom": the server would refuse a write or
// deny-oom command before it runs, where the retired scripts are refused only at their first
// write; each handler refuses there itself (`host::first_write`, docs/contract-decisions.md, "The memory
// limit" and "A read-only replica as a call target"). may-replicate keeps what a write flag gives
// that matters here: CLIENT PAUSE WRITE holds the commands back. PAUSE and RESUME are the Lua
// host's plain HSET and HDEL, which the server checks before they run and when a transaction
// queues them: they are registered with those commands' flags ("write deny-oom", "write"), so
// that a transaction holding one is refused whole, as the host's is (docs/contract-decisions.md,
// "Two refusals at once").
// Key positions: first key 2, last 1 + numkeys, step 1 (numkeys is fixed per command, and each
// handler still checks it). Table: difftest/spec/commands.py.
valkey_module! {
    name: "emq",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    init: init,
    commands: [
        ["EMQ.ENQUEUE", emq_enqueue, "may-replicate", 2, 4, 1],
        ["EMQ.CLAIM", emq_claim, "may-replicate", 2, 4, 1],
        ["EMQ.EXTEND", emq_extend, "may-replicate", 2, 3, 1],
        ["EMQ.COMPLETE", emq_complete, "may-replicate", 2, 4, 1],
        ["EMQ.FAIL", emq_fail, "may-replicate", 2, 5, 1],
        ["EMQ.PROMOTE", emq_promote, "may-replicate", 2, 4, 1],
        ["EMQ.SWEEP", emq_sweep, "may-replicate", 2, 5, 1],
        ["EMQ.REVIVE", emq_revive, "may-replicate", 2, 4, 1],
        ["EMQ.PAUSE", emq_pause, "write deny-oom", 2, 2, 1],
        ["EMQ.RESUME", emq_resume, "write", 2, 2, 1],
    ],
}
