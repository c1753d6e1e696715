//! The transitions, one file each, and the gates every one of them opens with: shape, then layout.

pub mod claim;
pub mod complete;
pub mod enqueue;
pub mod extend;
pub mod fail;
pub mod fence;
pub mod metrics;
pub mod pause;
pub mod promote;
pub mod revive;
pub mod sweep;

use valkey_module::ValkeyError;

use crate::args;
use crate::errors;
use crate::layout::Queue;

/// A call that passed the shape and layout gates: its queue, keys and (unparsed) arguments.
pub struct Call<'a> {
    pub q: Queue,
    pub keys: Vec<&'a [u8]>,
    pub args: Vec<&'a [u8]>,
}

/// Shape (EMQ SHAPE), then layout (EMQ LAYOUT); `suffixes` are the command table's key suffixes.
pub fn gates<'a>(
    argv: &[&'a [u8]],
    suffixes: &[&str],
    nargs: usize,
) -> Result<Call<'a>, ValkeyError> {
    let s = args::shape(argv, suffixes.len(), nargs).map_err(errors::emq)?;
    let q = Queue::from_keys(&s.keys, suffixes).ok_or(errors::emq(errors::LAYOUT))?;
    Ok(Call {
        q,
        keys: s.keys,
        args: s.args,
    })
}

/// The argument at `i`; shape guaranteed it, and a miss is an error reply, never a panic.
pub fn arg<'a>(call: &Call<'a>, i: usize) -> Result<&'a [u8], ValkeyError> {
    call.args.get(i).copied().ok_or(errors::emq(errors::SHAPE))
}

/// The declared key at `i`, same guarantee.
pub fn key<'a>(call: &Call<'a>, i: usize) -> Result<&'a [u8], ValkeyError> {
    call.keys.get(i).copied().ok_or(errors::emq(errors::SHAPE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_text(e: ValkeyError) -> String {
        e.to_string()
    }

    #[test]
    fn shape_before_layout_before_arguments() {
        // wrong numkeys and a bad layout: SHAPE wins
        let argv: Vec<&[u8]> = vec![b"EMQ.CLAIM", b"2", b"x", b"y", b"z", b"0"];
        let e = gates(&argv, &["pending", "active", ""], 1)
            .err()
            .map(err_text);
        assert_eq!(e.as_deref(), Some(errors::SHAPE));
        // good shape, bad layout: LAYOUT, whatever the (bad) integer
        let argv: Vec<&[u8]> = vec![b"EMQ.CLAIM", b"3", b"x", b"y", b"z", b"-0"];
        let e = gates(&argv, &["pending", "active", ""], 1)
            .err()
            .map(err_text);
        assert_eq!(e.as_deref(), Some(errors::LAYOUT));
        // good shape and layout: the arguments come back unparsed, for the integer gate
        let argv: Vec<&[u8]> = vec![
            b"EMQ.CLAIM",
            b"3",
            b"emq:{q}:pending",
            b"emq:{q}:active",
            b"emq:{q}:",
            b"-0",
        ];
        let call = gates(&argv, &["pending", "active", ""], 1).expect("gates");
        assert_eq!(arg(&call, 0).ok(), Some(&b"-0"[..]));
        assert_eq!(key(&call, 1).ok(), Some(&b"emq:{q}:active"[..]));
        assert!(arg(&call, 1).is_err());
        assert_eq!(call.q.job(b"j"), b"emq:{q}:job:j");
    }
}
