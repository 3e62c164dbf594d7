//! The tool traits that `#[tool]` implements.
//!
//! A tool is split in two traits:
//!
//! * [`ToolDef`] — what the tool *is*: its class (a type), argument and
//!   output types, and its [`ToolSpec`] (name, description, options). It does
//!   not depend on application state, so registries and compile-time checks
//!   can read it.
//! * [`Tool<S>`] — how it *runs* given the executor's state `S`.
//!
//! `#[tool]` writes both for you; implementing them by hand is possible and
//! is what the macro's expansion shows.

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::class::{Class, ClassKind};
use crate::ctx::ToolCtx;
use crate::error::ToolError;

/// How a tool's key is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySpec {
    /// The provider's call id, else (run id, step, tool, canonical args).
    Default,
    /// A natural key over argument fields, for find-or-create; calls whose
    /// selected fields are equal (after normalisers) within one time window
    /// share a key even when other arguments differ.
    Natural {
        /// The argument fields the key is made of.
        fields: &'static [&'static str],
        /// Calls in different windows get different keys.
        window: Option<Duration>,
    },
    /// The tool's own function returns the key material
    /// ([`ToolDef::key_material`]).
    Custom,
}

/// Everything about a tool that is fixed at compile time.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// The tool's name, as the model calls it.
    pub name: &'static str,
    /// The description shown to the model.
    pub description: &'static str,
    /// How the key is derived.
    pub key: KeySpec,
    /// Key derivation version ([`crate::key::DEFAULT_KEY_VERSION`] unless
    /// overridden).
    pub key_version: u32,
    /// How long the completed record is kept (`None`: the executor default,
    /// 24 h).
    pub ttl: Option<Duration>,
    /// Per-attempt timeout (`None`: the executor default). A timeout is an
    /// ambiguous error.
    pub timeout: Option<Duration>,
    /// Most attempts, including the first (`None`: the executor default).
    /// Only meaningful for retry-safe classes; `#[tool]` rejects it on the
    /// others.
    pub max_attempts: Option<u32>,
    /// Whether [`Tool::reconcile`] is implemented.
    pub has_reconcile: bool,
    /// Whether the call's canonical arguments are kept with its record for
    /// operators to read (`true`); `false` for arguments too sensitive to
    /// store, which are then known by their fingerprint only.
    pub store_args: bool,
}

impl ToolSpec {
    /// A spec with `name` and `description` and every option at its default.
    pub const fn new(name: &'static str, description: &'static str) -> Self {
        ToolSpec {
            name,
            description,
            key: KeySpec::Default,
            key_version: crate::key::DEFAULT_KEY_VERSION,
            ttl: None,
            timeout: None,
            max_attempts: None,
            has_reconcile: false,
            store_args: true,
        }
    }
}

/// Key material a tool computes from its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyMaterial {
    /// The selected (normalised) fields of a natural key, as a JSON object.
    Natural(serde_json::Value),
    /// The text returned by a custom key function.
    Custom(String),
}

/// What a reconcile hook found out about a call whose owner vanished.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled<T> {
    /// The effect happened; this is its output. It is recorded.
    Applied(T),
    /// The effect did not happen; the call may run now.
    NotApplied,
    /// It cannot be told; the outcome is recorded as unknown.
    Unknown,
}

/// What a tool is, independent of application state. Implemented by
/// `#[tool]`.
pub trait ToolDef: Send + Sync + 'static {
    /// The class marker ([`crate::class::Read`], …).
    type Class: Class;
    /// The arguments, deserialized from the model's JSON.
    type Args: Serialize + DeserializeOwned + schemars::JsonSchema + Clone + Send + Sync + 'static;
    /// The output, recorded as JSON and returned to duplicates.
    type Output: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Name, description and options.
    const SPEC: ToolSpec;

    /// The JSON Schema of [`ToolDef::Args`].
    fn input_schema() -> schemars::Schema {
        schemars::schema_for!(Self::Args)
    }

    /// The JSON Schema of [`ToolDef::Output`] as the tool *writes* it
    /// (serde's serialize contract), when the output type has one.
    ///
    /// `#[tool]` returns the schema whenever the output type implements
    /// [`schemars::JsonSchema`], and `None` otherwise; MCP advertises it as
    /// the tool's `outputSchema`. The default is `None`.
    fn output_schema() -> Option<schemars::Schema> {
        None
    }

    /// Key material for [`KeySpec::Natural`] and [`KeySpec::Custom`] tools.
    fn key_material(_args: &Self::Args) -> Option<KeyMaterial> {
        None
    }

    /// This tool's spec: [`ToolDef::SPEC`]. A tool known only at run time
    /// (one of an MCP server that `idem proxy` fronts) returns its own;
    /// the executor and the registry read this, never `SPEC` directly.
    fn runtime_spec(&self) -> &'static ToolSpec {
        const { &Self::SPEC }
    }

    /// This tool's class: [`ToolDef::Class`]'s. A tool known only at run
    /// time returns its own (its `Class` type is then only a placeholder:
    /// such a tool is called by dispatch, which reads the class from
    /// here).
    fn runtime_class(&self) -> ClassKind {
        <Self::Class as Class>::KIND
    }

    /// This tool's key material for `args`: [`ToolDef::key_material`]'s.
    fn runtime_key_material(&self, args: &Self::Args) -> Option<KeyMaterial> {
        Self::key_material(args)
    }
}

/// How a tool runs, given the executor's state `S`. Implemented by
/// `#[tool]`; `S` is free unless the tool takes a [`crate::state::State`].
pub trait Tool<S>: ToolDef {
    /// Run the tool once.
    fn call(
        &self,
        args: Self::Args,
        ctx: &ToolCtx,
        state: &S,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;

    /// Find out whether a call whose owner vanished took effect (for example
    /// by looking its Message-ID up in the provider's sent log). Tools
    /// without a hook answer [`Reconciled::Unknown`].
    fn reconcile(
        &self,
        args: &Self::Args,
        ctx: &ToolCtx,
        state: &S,
    ) -> impl Future<Output = Result<Reconciled<Self::Output>, ToolError>> + Send {
        let _ = (args, ctx, state);
        std::future::ready(Ok(Reconciled::Unknown))
    }
}
