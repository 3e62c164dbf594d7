//! What the first claim of a key recorded about the call ([`CallInfo`]),
//! the borrowed form a claim carries ([`CallInfoRef`]), and why the call
//! was made in the caller's words ([`Reason`]).

use std::time::Duration;

/// Why a call was made, in the caller's words: typically the model's own
/// text that led to the tool call (an assistant message's text beside its
/// tool calls), shown to the person who decides on it. Free text, never
/// part of the key or the fingerprint: calls that differ only in their
/// reason are the same call, and the record keeps the first claim's.
///
/// Bounded: at most [`Reason::MAX_BYTES`] bytes are kept. A longer text
/// is cut at a character boundary and ends with [`Reason::CUT`], so that
/// a reader sees it is not the whole of it. It is cut rather than refused
/// because it only explains the call: a write must not fail (and a model
/// cannot mend an MCP request's `_meta`) because its explanation ran long.
///
/// Text from a model: escape it before showing it
/// ([`text::visible`](crate::text::visible)); it has no `Display` for
/// that reason.
///
/// ```
/// use idem_runtime::record::Reason;
///
/// let why = Reason::new("The customer asked for a refund of order 17.").unwrap();
/// assert_eq!(why.as_str(), "The customer asked for a refund of order 17.");
/// assert!(Reason::new("  ").is_none(), "nothing said is no reason");
/// let long = Reason::new("why ".repeat(1000)).unwrap();
/// assert!(long.as_str().len() <= Reason::MAX_BYTES);
/// assert!(long.as_str().ends_with(Reason::CUT));
/// ```
// One pointer wide, so that a record without a reason — nearly all of
// them — grows by one word rather than by a string's three (or a boxed
// str's two): `Option<Reason>` is 8 bytes.
#[allow(clippy::box_collection)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Reason(Box<String>);

impl Reason {
    /// How many bytes of a reason are kept, [`Reason::CUT`] included.
    pub const MAX_BYTES: usize = 2048;

    /// What a cut reason ends with.
    pub const CUT: &'static str = " … [cut: longer than idem keeps]";

    /// `text` as a reason, cut to [`Reason::MAX_BYTES`]; `None` when it
    /// is empty or only white space.
    pub fn new(text: impl Into<String>) -> Option<Reason> {
        let text = text.into();
        (!text.trim().is_empty()).then(|| Reason::bounded(text))
    }

    /// `text` cut to [`Reason::MAX_BYTES`], whatever it is.
    fn bounded(mut text: String) -> Reason {
        if text.len() > Self::MAX_BYTES {
            let mut end = Self::MAX_BYTES - Self::CUT.len();
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str(Self::CUT);
        }
        Reason(Box::new(text))
    }

    /// The text (not escaped).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A stored reason reads back bounded, whoever wrote it.
impl<'de> serde::Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Reason, D::Error> {
        String::deserialize(d).map(Reason::bounded)
    }
}

/// What the first claim of a key recorded about the call: what an operator
/// needs to find it and judge it.
///
/// It gains a field now and then, so outside idem it is made from
/// [`CallInfo::default`] (or [`CallInfo::EMPTY`]) with its fields set one
/// by one, as a store's decoder does:
///
/// ```
/// use idem_runtime::record::CallInfo;
///
/// let mut info = CallInfo::default();
/// info.call_id = Some("call_1".into());
/// info.step = Some(3);
/// assert!(!info.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
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
    /// Why the call was made, in the caller's words, when it said
    /// ([`Reason`]). `None` in records written before idem 0.4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
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
    /// Why the call was made ([`Reason`]: already bounded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
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
        reason: None,
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
            reason: self.reason.map(|r| Reason::bounded(r.to_owned())),
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
            reason: self.reason.as_ref().map(Reason::as_str),
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
        reason: None,
    };

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Self::EMPTY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records are many and nearly none has a reason: a `None` costs one
    /// word (`CallInfo` was 128 bytes before reasons, `Record` 416; the
    /// `Arc<Record>` allocation stays in glibc's 448-byte size class).
    #[test]
    fn no_reason_costs_one_word() {
        assert_eq!(std::mem::size_of::<Option<Reason>>(), 8);
        assert!(std::mem::size_of::<CallInfo>() <= 136);
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_and_says_so() {
        // Two-byte characters put the cut inside one unless it steps back.
        let cut = Reason::new("é".repeat(Reason::MAX_BYTES)).unwrap();
        assert!(cut.as_str().len() <= Reason::MAX_BYTES);
        assert!(cut.as_str().ends_with(Reason::CUT));
        let exact = "x".repeat(Reason::MAX_BYTES);
        assert_eq!(Reason::new(exact.clone()).unwrap().as_str(), exact);
        let stored: Reason = serde_json::from_value(serde_json::json!(exact + "y")).unwrap();
        assert!(
            stored.as_str().ends_with(Reason::CUT),
            "bounded when read too"
        );
    }

    #[test]
    fn a_reason_round_trips_through_the_borrowed_form_and_json() {
        let info = CallInfo {
            reason: Reason::new("refund <b>order</b>\u{202e} 17"),
            ..CallInfo::default()
        };
        assert_eq!(info.as_ref().to_owned(), info);
        let json = serde_json::to_string(&info).unwrap();
        assert_eq!(serde_json::from_str::<CallInfo>(&json).unwrap(), info);
        assert!(!serde_json::to_string(&CallInfo::EMPTY)
            .unwrap()
            .contains("reason"));
    }
}
