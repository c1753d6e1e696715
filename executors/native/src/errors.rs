//! The module's error replies, word for word the texts of difftest/spec/errors.py (one place each side).

use valkey_module::ValkeyError;

pub const SHAPE: &str = "EMQ SHAPE wrong number of keys or arguments";
pub const LAYOUT: &str = "EMQ LAYOUT keys are not one queue's layout";
pub const ARG: &str = "EMQ ARG argument out of range";
pub const NOTINT: &str = "EMQ NOTINT value is not an integer";
pub const OVERFLOW: &str = "EMQ OVERFLOW value is out of range";
pub const HOSTREPLY: &str = "EMQ HOSTREPLY unexpected reply from the server";
pub const LANE: &str = "EMQ LANE job row has a group field";
pub const NOPERM: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";
/// The server's own refusals of a write (shared.roslaveerr, shared.oomerr), word for word.
pub const READONLY: &str = "READONLY You can't write against a read only replica.";
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// One of the texts above as an error reply. `Str` keeps it static: no allocation, no CString of
/// caller bytes, so building an error can never panic.
pub fn emq(text: &'static str) -> ValkeyError {
    ValkeyError::Str(text)
}

/// Shorthand for the reply that means "the server answered something the plan did not predict".
pub fn host_reply() -> ValkeyError {
    emq(HOSTREPLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_starts_with_its_code() {
        for (text, code) in [
            (SHAPE, "EMQ SHAPE "),
            (LAYOUT, "EMQ LAYOUT "),
            (ARG, "EMQ ARG "),
            (NOTINT, "EMQ NOTINT "),
            (OVERFLOW, "EMQ OVERFLOW "),
            (HOSTREPLY, "EMQ HOSTREPLY "),
            (LANE, "EMQ LANE "),
            (NOPERM, "NOPERM "),
            (READONLY, "READONLY "),
            (OOM, "OOM "),
        ] {
            assert!(text.starts_with(code), "{text}");
            assert!(text.is_ascii() && !text.contains(['\r', '\n', '\0']));
        }
    }
}
