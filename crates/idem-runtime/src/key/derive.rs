//! Deriving a key: where it comes from ([`KeySource`]), what it is derived
//! from ([`KeyInput`]) and the framed SHA-256 of `docs/keys.md`.

use std::time::Duration;

use serde_json::Value;

use super::{check_part, CanonicalArgs, Framer, IdempotencyKey, KeyError, Namespace};
use crate::canonical;

/// Where a key comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum KeySource<'a> {
    /// The provider's tool-call id (OpenAI `tool_calls[].id`, Anthropic
    /// `tool_use.id`).
    CallId(&'a str),
    /// No call id: the position of the call in a run, plus its arguments.
    Step {
        /// The agent run's id.
        run_id: &'a str,
        /// The step of the run that made the call.
        step: u64,
        /// The call's canonical arguments (their fingerprint is hashed).
        args: &'a CanonicalArgs,
    },
    /// A natural key: selected (normalised) argument fields, optionally
    /// bucketed into a time window, for find-or-create.
    Natural {
        /// The selected fields as a JSON object.
        fields: &'a Value,
        /// `floor(unix seconds / window seconds)` when the tool has a window.
        window: Option<u64>,
    },
    /// Material returned by a tool's custom key function.
    Custom(&'a str),
    /// No key from the caller: the same tool with the same arguments within
    /// a window of time is one effect (see
    /// [`RepeatWindow`](crate::RepeatWindow)). Each new effect gets a
    /// generation number from the tool's window index
    /// ([`KeySource::WindowIndex`]), which the executor reads to find the
    /// effect a call repeats.
    Window {
        /// The window's length in whole seconds (at least 1).
        seconds: u64,
        /// The effect's generation, as the window index gave it out.
        number: u64,
        /// How many identical effects the caller meant before this one
        /// (0: this is the first).
        repeat: u32,
        /// The call's canonical arguments (their fingerprint is hashed).
        args: &'a CanonicalArgs,
    },
    /// The window index of a tool in a namespace: the record that says
    /// which effects of the tool's windowed calls are current (the latest
    /// arguments, and any still unsettled), so that a call in between with
    /// other arguments ends a window and an unsettled effect never lapses.
    WindowIndex {
        /// The window's length in whole seconds (at least 1).
        seconds: u64,
    },
}

/// Everything a key is derived from.
#[derive(Clone, Debug)]
pub struct KeyInput<'a> {
    /// Derivation version ([`DEFAULT_KEY_VERSION`](super::DEFAULT_KEY_VERSION) unless the tool says).
    pub version: u32,
    /// Tenant / principal.
    pub namespace: &'a Namespace,
    /// The tool's name.
    pub tool: &'a str,
    /// Where the key comes from.
    pub source: KeySource<'a>,
}

/// The window number of `now_millis` for a natural key with `window`.
pub fn window_bucket(now_millis: u64, window: Duration) -> u64 {
    let secs = window.as_secs().max(1);
    now_millis / 1000 / secs
}

/// Derive a key.
///
/// ```
/// use idem_runtime::key::{derive_key, KeyInput, KeySource, Namespace};
///
/// let ns = Namespace::default();
/// let key = derive_key(&KeyInput {
///     version: 1,
///     namespace: &ns,
///     tool: "send_email",
///     source: KeySource::CallId("call_abc123"),
/// })
/// .unwrap();
/// assert_eq!(key.as_str().len(), 64);
/// ```
pub fn derive_key(input: &KeyInput<'_>) -> Result<IdempotencyKey, KeyError> {
    check_part("tool name", input.tool)?;
    let mut numbers = itoa::Buffer::new();
    let mut h = Framer::new("idem-key");
    h.field(numbers.format(input.version).as_bytes())
        .field(input.namespace.as_str().as_bytes())
        .field(input.tool.as_bytes());
    match &input.source {
        KeySource::CallId(id) => {
            check_part("call id", id)?;
            h.field(b"call").field(id.as_bytes());
        }
        KeySource::Step { run_id, step, args } => {
            check_part("run id", run_id)?;
            h.field(b"step")
                .field(run_id.as_bytes())
                .field(numbers.format(*step).as_bytes())
                .field(args.fingerprint.text_bytes());
        }
        KeySource::Natural { fields, window } => {
            let text = canonical::canonicalize(fields)?;
            let window = window.map_or("", |w| numbers.format(w));
            h.field(b"natural")
                .field(text.as_bytes())
                .field(window.as_bytes());
        }
        KeySource::Custom(material) => {
            check_part("custom key", material)?;
            h.field(b"custom").field(material.as_bytes());
        }
        KeySource::Window {
            seconds,
            number,
            repeat,
            args,
        } => {
            h.field(b"window")
                .field(numbers.format((*seconds).max(1)).as_bytes())
                .field(numbers.format(*number).as_bytes())
                .field(numbers.format(*repeat).as_bytes())
                .field(args.fingerprint.text_bytes());
        }
        KeySource::WindowIndex { seconds } => {
            h.field(b"window-index")
                .field(numbers.format((*seconds).max(1)).as_bytes());
        }
    }
    Ok(h.finish())
}
