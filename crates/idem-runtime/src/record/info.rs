//! What the first claim of a key recorded about the call ([`CallInfo`]),
//! and the borrowed form a claim carries ([`CallInfoRef`]).

use std::time::Duration;

/// What the first claim of a key recorded about the call: what an operator
/// needs to find it and judge it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallInfo {
    /// The tenant / principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The provider's call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The agent run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The step within the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The canonical arguments (RFC 8785 JSON text), unless the tool keeps
    /// its arguments out of the store (`#[tool(sensitive)]`): then only the
    /// record's fingerprint identifies them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// How long the tool keeps its outcomes (its `ttl`, else the
    /// executor's): what a decision about the call — an approval, a denial,
    /// an operator's resolution — is kept for, so that nothing decided
    /// lapses sooner than the tool's own outcomes would. `None` in records
    /// written before idem 0.3.
    #[serde(
        default,
        rename = "ttl_ms",
        skip_serializing_if = "Option::is_none",
        with = "opt_millis"
    )]
    pub ttl: Option<Duration>,
}

/// An optional span as whole milliseconds (saturating at `u64::MAX`).
mod opt_millis {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(
        span: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match span {
            Some(d) => s.serialize_some(&(d.as_millis().min(u128::from(u64::MAX)) as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let ms: Option<u64> = serde::Deserialize::deserialize(d)?;
        Ok(ms.map(Duration::from_millis))
    }
}

/// [`CallInfo`] borrowed from the call, as a claim carries it: a store
/// copies it only when the claim creates a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallInfoRef<'a> {
    /// The tenant / principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<&'a str>,
    /// The provider's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<&'a str>,
    /// The agent run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<&'a str>,
    /// The step within the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The canonical arguments, unless the tool keeps them out of the store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<&'a str>,
    /// How long the tool keeps its outcomes.
    #[serde(
        rename = "ttl_ms",
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_millis::serialize"
    )]
    pub ttl: Option<Duration>,
}

impl CallInfoRef<'_> {
    /// Nothing known.
    pub const EMPTY: CallInfoRef<'static> = CallInfoRef {
        namespace: None,
        call_id: None,
        run_id: None,
        step: None,
        args: None,
        ttl: None,
    };

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == CallInfoRef::EMPTY
    }

    /// An owned copy, for the record.
    pub fn to_owned(&self) -> CallInfo {
        CallInfo {
            namespace: self.namespace.map(str::to_owned),
            call_id: self.call_id.map(str::to_owned),
            run_id: self.run_id.map(str::to_owned),
            step: self.step,
            args: self.args.map(str::to_owned),
            ttl: self.ttl,
        }
    }
}

impl CallInfo {
    /// Borrowed, as a claim carries it.
    pub fn as_ref(&self) -> CallInfoRef<'_> {
        CallInfoRef {
            namespace: self.namespace.as_deref(),
            call_id: self.call_id.as_deref(),
            run_id: self.run_id.as_deref(),
            step: self.step,
            args: self.args.as_deref(),
            ttl: self.ttl,
        }
    }

    /// Nothing known (records written before idem 0.2, stores tested alone).
    pub const EMPTY: CallInfo = CallInfo {
        namespace: None,
        call_id: None,
        run_id: None,
        step: None,
        args: None,
        ttl: None,
    };

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Self::EMPTY
    }
}
