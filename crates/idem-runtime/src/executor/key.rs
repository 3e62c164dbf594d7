//! Phase 1: the call's key, from its canonical arguments and whatever the
//! tool's key derivation reads (call id, run and step, natural or custom key
//! material). See [`crate::key`] for the derivation itself.

use crate::clock::Clock;
use crate::error::IdemError;
use crate::key::{self, CanonicalArgs, IdempotencyKey, KeyError, KeyInput, KeySource, Namespace};
use crate::tool::{KeyMaterial, KeySpec, ToolSpec};

use super::env::CallEnv;

/// A call's key and what its claim compares.
pub(super) struct CallKey {
    pub(super) key: IdempotencyKey,
    /// The canonical arguments (their fingerprint is stored with the record).
    pub(super) args: CanonicalArgs,
    /// Whether another fingerprint under this key is a key reuse.
    pub(super) check_fingerprint: bool,
    /// The tenant the key belongs to.
    pub(super) namespace: Namespace,
    /// Set when the key is a window's ([`KeySource::Window`]): the claim
    /// reads the tool's window index for the effect's generation, so the
    /// key above is only a placeholder until then.
    /// Boxed: few calls have one, and every call's future holds the key.
    pub(super) window: Option<Box<WindowKeys>>,
    /// The key of a call an approver edited, which the call as made goes
    /// on as ([`edited`](super::edited)): its tool is told
    /// ([`ToolCtx::arguments_edited`](crate::ToolCtx::arguments_edited)).
    pub(super) edited: bool,
}

/// What a window key is derived from, but the effect's generation.
#[derive(Clone, Copy, Debug)]
pub(super) struct WindowKeys {
    pub(super) version: u32,
    pub(super) tool: &'static str,
    /// The window's length in whole seconds (at least 1).
    pub(super) seconds: u64,
    pub(super) repeat: u32,
}

impl WindowKeys {
    /// The length of a window, in milliseconds.
    pub(super) fn millis(&self) -> u64 {
        self.seconds * 1000
    }
}

impl CallKey {
    /// The key of the effect of generation `number` for this call's tool
    /// and arguments.
    pub(super) fn window_key(&self, number: u64) -> IdempotencyKey {
        self.window_derived(
            |window| KeySource::Window {
                seconds: window.seconds,
                number,
                repeat: window.repeat,
                args: &self.args,
            },
            "a window key derives as the first did",
        )
    }

    /// The key of the window index of this call's tool in its namespace.
    pub(super) fn index_key(&self) -> IdempotencyKey {
        self.window_derived(
            |window| KeySource::WindowIndex {
                seconds: window.seconds,
            },
            "an index key derives as the window key did",
        )
    }

    /// A key of this call's window, derived from `source`.
    fn window_derived<'a>(
        &'a self,
        source: impl FnOnce(WindowKeys) -> KeySource<'a>,
        derives: &str,
    ) -> IdempotencyKey {
        let window = *self.window.as_deref().expect("a window key");
        key::derive_key(&KeyInput {
            version: window.version,
            namespace: &self.namespace,
            tool: window.tool,
            source: source(window),
        })
        // Every part was checked when the first window key was derived.
        .expect(derives)
    }
}

/// Canonicalize `args` and derive the key; nothing has touched the
/// store yet, so an error here means nothing ran.
pub(super) fn derive<A: serde::Serialize>(
    env: &CallEnv<'_>,
    args: &A,
    material: Option<KeyMaterial>,
) -> Result<CallKey, IdemError> {
    let canonical =
        CanonicalArgs::from_serialize(args).map_err(|e| IdemError::InvalidArguments {
            tool: env.name().to_owned(),
            detail: e.to_string(),
        })?;
    canonical_key(env, canonical, material.as_ref())
}

/// The type-independent part of [`derive`].
fn canonical_key(
    env: &CallEnv<'_>,
    args: CanonicalArgs,
    material: Option<&KeyMaterial>,
) -> Result<CallKey, IdemError> {
    let namespace = env.namespace();
    let source = CallKeySource {
        call_id: env.call_id.as_deref(),
        run: env.run.run_id.as_deref().map(|run| (run, env.run.step)),
        window: env.run.repeat_window.map(|w| WindowKeys {
            version: env.spec.key_version,
            tool: env.spec.name,
            // The TTL at most: a record older than that is gone.
            seconds: w.within.min(env.ttl()).as_secs().max(1),
            repeat: w.repeat,
        }),
        args: &args,
        namespace: &namespace,
        clock: env.clock(),
    };
    let window = source.window;
    let (key, check_fingerprint, windowed) =
        key_for_call(env.spec, material, source).map_err(|source| IdemError::Key {
            tool: env.name().to_owned(),
            source,
        })?;
    Ok(CallKey {
        key,
        args,
        check_fingerprint,
        namespace,
        window: window.filter(|_| windowed).map(Box::new),
        edited: false,
    })
}

/// Where one call's key comes from: the tool's key derivation applied to
/// what is known about the call. A natural or custom key never falls back
/// to another derivation (that would key the call differently from its
/// duplicates), and the default derivation takes the provider's call id
/// before the run and step.
///
/// Returns the key, whether a different argument fingerprint under it
/// is a key reuse (`false` only for natural keys, which are find-or-create),
/// and whether it is a window's key.
fn key_for_call(
    spec: &ToolSpec,
    material: Option<&KeyMaterial>,
    call: CallKeySource<'_>,
) -> Result<(IdempotencyKey, bool, bool), KeyError> {
    let window;
    let (source, check_fingerprint) = match (spec.key, material) {
        (KeySpec::Natural { window: w, .. }, Some(KeyMaterial::Natural(fields))) => {
            window = w.map(|w| key::window_bucket(call.clock.now().as_millis(), w));
            (KeySource::Natural { fields, window }, false)
        }
        (KeySpec::Custom, Some(KeyMaterial::Custom(text))) => (KeySource::Custom(text), true),
        (KeySpec::Natural { .. }, _) | (KeySpec::Custom, _) => {
            return Err(KeyError::NoMaterial {
                tool: spec.name.to_owned(),
                derivation: if matches!(spec.key, KeySpec::Custom) {
                    "custom"
                } else {
                    "natural"
                },
            });
        }
        (KeySpec::Default, _) => match (call.call_id, call.run) {
            (Some(id), _) => (KeySource::CallId(id), true),
            (None, Some((run_id, step))) => (
                KeySource::Step {
                    run_id,
                    step,
                    args: call.args,
                },
                true,
            ),
            (None, None) => match call.window {
                Some(window) => (
                    KeySource::Window {
                        seconds: window.seconds,
                        // A placeholder: the window index gives the
                        // generation when the call is claimed.
                        number: 0,
                        repeat: window.repeat,
                        args: call.args,
                    },
                    true,
                ),
                None => {
                    return Err(KeyError::NoSource {
                        tool: spec.name.to_owned(),
                    })
                }
            },
        },
    };
    let windowed = matches!(source, KeySource::Window { .. });
    let key = key::derive_key(&KeyInput {
        version: spec.key_version,
        namespace: call.namespace,
        tool: spec.name,
        source,
    })?;
    Ok((key, check_fingerprint, windowed))
}

/// What is known about one call when its key is chosen.
#[derive(Clone, Copy, Debug)]
struct CallKeySource<'a> {
    /// The provider's tool-call id.
    call_id: Option<&'a str>,
    /// The run id and step.
    run: Option<(&'a str, u64)>,
    /// How to key a call with neither.
    window: Option<WindowKeys>,
    /// The call's canonical arguments.
    args: &'a CanonicalArgs,
    /// The tenant.
    namespace: &'a Namespace,
    /// The clock, read only for natural-key windows (a repeat window has
    /// read it already).
    clock: &'a dyn Clock,
}
