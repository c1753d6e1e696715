"""The two executors' hosts: the Lua scripts with the host logic a real client runs around them
(`lua/`), and the native module's crate with its loader (`native/`)."""
