"""Every EMQ error text in one place; the Rust module mirrors them in src/errors.rs."""

from __future__ import annotations

SHAPE = "EMQ SHAPE wrong number of keys or arguments"
LAYOUT = "EMQ LAYOUT keys are not one queue's layout"
ARG = "EMQ ARG argument out of range"
NOTINT = "EMQ NOTINT value is not an integer"
OVERFLOW = "EMQ OVERFLOW value is out of range"
HOSTREPLY = "EMQ HOSTREPLY unexpected reply from the server"
LANE = "EMQ LANE job row has a group field"
NOPERM = "NOPERM this user has no permissions to access one of the keys used as arguments"
# the server's own refusals of a write, which the module answers at the script's first write
READONLY = "READONLY You can't write against a read only replica."
OOM = "OOM command not allowed when used memory > 'maxmemory'."

BY_CODE: dict[str, str] = {text.split()[1]: text for text in (SHAPE, LAYOUT, ARG, NOTINT, OVERFLOW, HOSTREPLY, LANE)}


SCRIPT_ACL_FAILURE = "ERR ACL failure in script"


def error_code(message: str) -> str:
    """The code of an error reply: `EMQ X` for the module's errors, else the first word.

    Inside a script an ACL refusal surfaces as `ERR ACL failure in script: ...`: the same refusal
    a plain command answers with NOPERM, so it has the code NOPERM."""
    if message.startswith(SCRIPT_ACL_FAILURE):
        return "NOPERM"
    words = message.split()
    if not words:
        return ""
    if words[0] == "EMQ" and len(words) > 1:
        return f"EMQ {words[1]}"
    return words[0]
