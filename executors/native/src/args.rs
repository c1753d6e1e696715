//! Shape and integer checks of a command's arguments: the first two gates of every handler.

use crate::errors;

/// Durations stay below 2^52 ms so that now + duration is below 2^53: exact as a zset score (a
/// double) and as a Lua number, and never an i64 overflow (docs/contract-decisions.md).
pub const MAX_DURATION_MS: i64 = 1 << 52;

/// Why a byte string is not an i64 by Valkey's `string2ll` rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntError {
    /// Not of the form: optional `-`, then `0` alone or a non-zero digit and digits.
    NotInt,
    /// Of the form, but outside i64, however long (docs/contract-decisions.md).
    Overflow,
}

/// Parses with Valkey's `string2ll` rules, telling "not a number" from "a number outside i64"
/// (string2ll itself answers both with failure; the argument gate reports them apart).
pub fn parse_int(raw: &[u8]) -> Result<i64, IntError> {
    if raw == b"0" {
        return Ok(0);
    }
    let (negative, digits) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, raw),
    };
    // the first digit is 1-9: no leading zeros, no "-0", no "+", no spaces
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return Err(IntError::NotInt),
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(IntError::NotInt);
    }
    // more than 20 bytes of digits cannot be an i64 (string2ll refuses them too; the gate calls
    // them out of range); at most 20 digits fit an i128 without overflow
    if raw.len() > 20 {
        return Err(IntError::Overflow);
    }
    let magnitude = digits
        .iter()
        .fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| IntError::Overflow)
}

/// Valkey's `string2ll`: the value, or None for anything HINCRBY would call "not an integer".
pub fn string2ll(raw: &[u8]) -> Option<i64> {
    parse_int(raw).ok()
}

/// One integer argument: the form, then i64, then the command's range; the error is the reply text.
pub fn int_arg(raw: &[u8], minimum: i64, maximum: i64) -> Result<i64, &'static str> {
    match parse_int(raw) {
        Err(IntError::NotInt) => Err(errors::NOTINT),
        Err(IntError::Overflow) => Err(errors::OVERFLOW),
        Ok(v) if v < minimum || v > maximum => Err(errors::ARG),
        Ok(v) => Ok(v),
    }
}

/// A duration argument: at least `minimum`, at most 2^52 ms.
pub fn duration_arg(raw: &[u8], minimum: i64) -> Result<i64, &'static str> {
    int_arg(raw, minimum, MAX_DURATION_MS)
}

/// A count or token argument: at least `minimum`, up to i64::MAX.
pub fn count_arg(raw: &[u8], minimum: i64) -> Result<i64, &'static str> {
    int_arg(raw, minimum, i64::MAX)
}

/// The argv of one call split into its keys and its arguments after the shape check.
#[derive(Debug)]
pub struct Shape<'a> {
    pub keys: Vec<&'a [u8]>,
    pub args: Vec<&'a [u8]>,
}

/// `CMD numkeys key... arg...`: numkeys must be exactly this command's key count (a string2ll
/// integer) and exactly `nargs` arguments must follow the keys; anything else is EMQ SHAPE.
pub fn shape<'a>(
    argv: &[&'a [u8]],
    numkeys: usize,
    nargs: usize,
) -> Result<Shape<'a>, &'static str> {
    let declared = argv.get(1).and_then(|n| string2ll(n));
    if declared != i64::try_from(numkeys).ok() || argv.len() != 2 + numkeys + nargs {
        return Err(errors::SHAPE);
    }
    Ok(Shape {
        keys: argv[2..2 + numkeys].to_vec(),
        args: argv[2 + numkeys..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::{ARG, NOTINT, OVERFLOW, SHAPE};

    #[test]
    fn canonical_integers_parse() {
        assert_eq!(parse_int(b"0"), Ok(0));
        assert_eq!(parse_int(b"1"), Ok(1));
        assert_eq!(parse_int(b"-1"), Ok(-1));
        assert_eq!(parse_int(b"1234567890"), Ok(1_234_567_890));
        assert_eq!(parse_int(b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Ok(i64::MIN));
    }

    #[test]
    fn non_canonical_forms_are_notint() {
        for raw in [
            &b""[..],
            b"-",
            b"-0",
            b"+1",
            b"01",
            b"00",
            b"-01",
            b" 1",
            b"1 ",
            b"1.0",
            b"1e3",
            b"0x10",
            b"abc",
            b"1\0",
            b"\xff",
            b"--1",
            b"12a",
            b"\xe2\x82\xac",
        ] {
            assert_eq!(parse_int(raw), Err(IntError::NotInt), "{raw:?}");
            assert_eq!(string2ll(raw), None);
            assert_eq!(int_arg(raw, 0, i64::MAX), Err(NOTINT));
        }
    }

    #[test]
    fn out_of_i64_is_overflow_while_of_the_form() {
        assert_eq!(parse_int(b"9223372036854775808"), Err(IntError::Overflow));
        assert_eq!(parse_int(b"-9223372036854775809"), Err(IntError::Overflow));
        // 20 digits: still of the form (≤ 20 bytes), outside i64
        assert_eq!(parse_int(b"99999999999999999999"), Err(IntError::Overflow));
        assert_eq!(int_arg(b"99999999999999999999", 0, i64::MAX), Err(OVERFLOW));
        // string2ll itself refuses both
        assert_eq!(string2ll(b"9223372036854775808"), None);
    }

    #[test]
    fn long_integers_are_overflow() {
        // of the form however long: out of range, not "not an integer"
        assert_eq!(parse_int(b"100000000000000000000"), Err(IntError::Overflow));
        assert_eq!(parse_int(b"-99999999999999999999"), Err(IntError::Overflow));
        assert_eq!(parse_int(b"-10000000000000000000"), Err(IntError::Overflow));
        assert_eq!(parse_int(b"-9999999999999999999"), Err(IntError::Overflow));
        assert_eq!(parse_int(&[b'1'; 40]), Err(IntError::Overflow));
        assert_eq!(int_arg(&[b'1'; 25], 0, i64::MAX), Err(OVERFLOW));
        // but still not of the form when anything else is wrong
        assert_eq!(
            parse_int(b"0000000000000000000000001"),
            Err(IntError::NotInt)
        );
        assert_eq!(parse_int(b""), Err(IntError::NotInt));
        // and a stored counter of 25 digits is still not an integer for HINCRBY
        assert_eq!(string2ll(&[b'1'; 25]), None);
    }

    #[test]
    fn minimums_and_maximums_are_arg() {
        assert_eq!(count_arg(b"0", 1), Err(ARG));
        assert_eq!(count_arg(b"1", 1), Ok(1));
        assert_eq!(count_arg(b"0", 0), Ok(0));
        assert_eq!(count_arg(b"-1", 0), Err(ARG));
        assert_eq!(count_arg(b"-9223372036854775808", 0), Err(ARG));
        assert_eq!(count_arg(b"9223372036854775807", 1), Ok(i64::MAX));
        assert_eq!(duration_arg(b"0", 1), Err(ARG));
        assert_eq!(duration_arg(b"0", 0), Ok(0));
        assert_eq!(duration_arg(b"4503599627370496", 1), Ok(MAX_DURATION_MS));
        assert_eq!(duration_arg(b"4503599627370497", 1), Err(ARG));
        assert_eq!(duration_arg(b"9223372036854775807", 0), Err(ARG));
        assert_eq!(duration_arg(b"9223372036854775808", 0), Err(OVERFLOW));
        assert_eq!(duration_arg(b"-0", 0), Err(NOTINT));
        assert_eq!(MAX_DURATION_MS, 4_503_599_627_370_496);
    }

    #[test]
    fn the_first_failure_in_order_is_reported() {
        // NOTINT before range: a malformed value never reaches the minimum check
        assert_eq!(int_arg(b"+0", 1, 10), Err(NOTINT));
        assert_eq!(int_arg(b"11", 1, 10), Err(ARG));
    }

    #[test]
    fn shape_needs_exact_numkeys_and_argc() {
        let argv: Vec<&[u8]> = vec![b"EMQ.CLAIM", b"3", b"p", b"a", b"b", b"100"];
        let s = shape(&argv, 3, 1).expect("good shape");
        assert_eq!(s.keys, vec![&b"p"[..], b"a", b"b"]);
        assert_eq!(s.args, vec![&b"100"[..]]);
        // wrong numkeys, non-canonical numkeys, too few, too many, nothing at all
        for bad in [
            vec![&b"EMQ.CLAIM"[..], b"2", b"p", b"a", b"b", b"100"],
            vec![&b"EMQ.CLAIM"[..], b"03", b"p", b"a", b"b", b"100"],
            vec![&b"EMQ.CLAIM"[..], b"x", b"p", b"a", b"b", b"100"],
            vec![&b"EMQ.CLAIM"[..], b"3", b"p", b"a", b"b"],
            vec![&b"EMQ.CLAIM"[..], b"3", b"p", b"a", b"b", b"1", b"2"],
            vec![&b"EMQ.CLAIM"[..]],
            vec![],
        ] {
            assert_eq!(shape(&bad, 3, 1).err(), Some(SHAPE));
        }
    }
}
