//! The names idem gives its fields in MCP messages: in the server's
//! capabilities, in `tools/list`, and in a result's `_meta`.

/// The server's entry in its capabilities' `experimental` map: the `_meta`
/// fields it reads a key from (`keyFields`), the header (`keyHeader`), and
/// what it does with a write that has none (`unkeyed`: `window`, with
/// `windowSeconds`, or `refuse`).
pub const CAPABILITY: &str = "io.idem";

/// The `_meta` field of a listed tool that names its class
/// (`non_idempotent_write`, …).
pub const CLASS_META: &str = "io.idem/class";

/// The `_meta` field of a listed tool that says how its calls are keyed
/// when they carry no key of idem's: `none` (a read), `natural` or
/// `custom` (by the tool), `window` (the same arguments within
/// [`WINDOW_SECONDS_META`] are one effect, until a call with other
/// arguments) or `key-required` (refused without a key).
pub const KEYING_META: &str = "io.idem/keying";

/// The `_meta` field of a listed tool keyed by a window: its length in
/// seconds.
pub const WINDOW_SECONDS_META: &str = "io.idem/windowSeconds";

/// The `_meta` field of a listed tool that has the optional argument that
/// marks a deliberate repeat: its name ([`REPEAT_ARGUMENT`](crate::REPEAT_ARGUMENT)).
pub const REPEAT_ARGUMENT_META: &str = "io.idem/repeatArgument";

/// The `_meta` field of an error result with the error for programs:
/// `{"code", "message", …}` (the text content is written for the model).
pub const ERROR_META: &str = "io.idem/error";

/// The `_meta` field of a `tools/call` result that says whether the answer
/// is an earlier call's recorded result (`true`) or this call's (`false`):
/// for tracing, since the content is the same either way.
pub const DEDUPLICATED_META: &str = "io.idem/deduplicated";

/// The `_meta` field of a successful `tools/call` result that holds the
/// idempotency key the call is recorded under (64 hex digits), to find
/// its record. Absent for reads, which are not recorded.
pub const KEY_META: &str = "io.idem/key";
