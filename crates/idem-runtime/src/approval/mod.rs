//! Approvals for `irreversible` tools.
//!
//! An irreversible tool never runs without an [`Approval`]. The typed API
//! takes one as a value (`Executor::call_approved`); dispatch from model
//! output asks the executor's [`ApprovalPolicy`] — an allow-list, a
//! callback, a human queue. Either way the decision is recorded under the
//! call's key before the tool runs, so a replay neither asks again nor runs
//! again, and a denial is recorded as the call's outcome.
//!
//! How a decision is recorded — parking a call for a person, approving or
//! denying it, reading an approval back — is one set of fenced transitions
//! (`transition.rs`) that the executor and
//! [`Operator`](crate::operator::Operator) both use.

pub mod rules;
pub(crate) mod transition;

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use serde_json::Value;

use crate::key::{Fingerprint, IdempotencyKey, Namespace};

/// Permission to run one irreversible call, and who gave it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Approval {
    /// Who approved (a user id, a policy name).
    pub approver: String,
    /// Why, if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The fingerprint of the canonical arguments this approval was given
    /// for. idem sets it when it records the approval (the arguments the
    /// policy was asked about, or those `idem show` displayed to the person
    /// approving), and only a call with these arguments ever runs under
    /// it. `None` on an approval not yet recorded, and in approvals
    /// recorded before idem 0.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

impl Approval {
    /// An approval given by `approver`.
    pub fn granted_by(approver: impl Into<String>) -> Self {
        Approval {
            approver: approver.into(),
            note: None,
            fingerprint: None,
        }
    }

    /// Bound to the arguments with `fingerprint` (see [`Approval::fingerprint`]).
    pub fn for_arguments(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }

    /// Whether this approval lets a call whose arguments have
    /// `fingerprint` run. An approval recorded before approvals carried a
    /// fingerprint (`None`) binds only where the store checked the
    /// arguments itself: `unbound_ok`.
    pub fn covers(&self, fingerprint: &Fingerprint, unbound_ok: bool) -> bool {
        match &self.fingerprint {
            Some(approved) => approved == fingerprint,
            None => unbound_ok,
        }
    }

    /// Add a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// One approval given towards a call that needs several before it runs
/// (a two-person rule), as recorded under
/// [`APPROVALS_STEP`](crate::record::APPROVALS_STEP): who, why, for which
/// arguments, and when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GivenApproval {
    /// The approval (its [`Approval::fingerprint`] set: the arguments it
    /// was given for).
    #[serde(flatten)]
    pub approval: Approval,
    /// When it was given (the store's clock).
    pub at: crate::clock::Timestamp,
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// The call may run.
    Approved(Approval),
    /// The call must not run.
    Denied {
        /// Why.
        reason: String,
    },
    /// A person decides later. The call is recorded as awaiting approval
    /// (holding no lease, since nothing runs) and the caller gets
    /// [`IdemError::ApprovalPending`](crate::error::IdemError::ApprovalPending);
    /// an operator approves or denies it with
    /// [`Operator`](crate::operator::Operator) or the `idem` command, and the
    /// next call with the same key runs under that approval, or gets the
    /// denial.
    Pending {
        /// What the person is asked, or where (shown by `idem show`).
        message: String,
    },
}

/// What a policy is asked about.
///
/// The executor makes it; a policy's own tests make one with
/// [`ApprovalRequest::new`] and the methods beside it (it gains a field now
/// and then, so it cannot be written as a struct literal outside idem):
///
/// ```
/// use idem_runtime::approval::ApprovalRequest;
/// use idem_runtime::key::{IdempotencyKey, Namespace};
///
/// let key = IdempotencyKey::parse(&"0".repeat(64)).unwrap();
/// let args = serde_json::json!({"id": 7});
/// let request = ApprovalRequest::new("delete_account", key, Namespace::default(), args)
///     .call_id("call_1")
///     .reason("The customer asked to close the account.");
/// assert_eq!(request.call_id.as_deref(), Some("call_1"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The tool.
    pub tool: String,
    /// The call's key.
    pub key: IdempotencyKey,
    /// The tenant / principal.
    pub namespace: Namespace,
    /// The provider's call id, if any.
    pub call_id: Option<String>,
    /// The call's arguments.
    pub args: Value,
    /// Why the call was made, in the caller's words, if it said: a policy
    /// that asks a person shows it escaped
    /// ([`text::visible`](crate::text::visible)).
    pub reason: Option<crate::record::Reason>,
}

impl ApprovalRequest {
    /// A request about a call of `tool` under `key` in `namespace`, with
    /// these arguments: no call id, no reason.
    pub fn new(
        tool: impl Into<String>,
        key: IdempotencyKey,
        namespace: Namespace,
        args: Value,
    ) -> Self {
        ApprovalRequest {
            tool: tool.into(),
            key,
            namespace,
            call_id: None,
            args,
            reason: None,
        }
    }

    /// The provider's call id.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }

    /// Why the call was made ([`Reason`](crate::record::Reason): cut when
    /// long; blank text is no reason).
    pub fn reason(mut self, text: impl Into<String>) -> Self {
        self.reason = crate::record::Reason::new(text);
        self
    }
}

/// Decides whether an irreversible call may run. Asked at most once per key.
#[async_trait]
pub trait ApprovalPolicy: Send + Sync + fmt::Debug + 'static {
    /// Decide. An `Err` is treated as a denial that is *not* recorded (the
    /// policy could not decide; a later call asks again).
    async fn decide(&self, request: &ApprovalRequest) -> Result<ApprovalDecision, String>;
}

/// Approves the listed tools, denies every other.
#[derive(Debug, Clone, Default)]
pub struct AllowList {
    tools: BTreeSet<String>,
}

impl AllowList {
    /// Approve exactly these tools.
    pub fn new<I, T>(tools: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        AllowList {
            tools: tools.into_iter().map(Into::into).collect(),
        }
    }
}

#[async_trait]
impl ApprovalPolicy for AllowList {
    async fn decide(&self, request: &ApprovalRequest) -> Result<ApprovalDecision, String> {
        Ok(if self.tools.contains(&request.tool) {
            ApprovalDecision::Approved(Approval::granted_by("allow-list"))
        } else {
            ApprovalDecision::Denied {
                reason: format!("`{}` is not on the allow-list", request.tool),
            }
        })
    }
}

/// Denies everything: irreversible tools cannot run.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

#[async_trait]
impl ApprovalPolicy for DenyAll {
    async fn decide(&self, _: &ApprovalRequest) -> Result<ApprovalDecision, String> {
        Ok(ApprovalDecision::Denied {
            reason: "irreversible tools are disabled".into(),
        })
    }
}

type DecideFn = dyn Fn(ApprovalRequest) -> Pin<Box<dyn Future<Output = Result<ApprovalDecision, String>> + Send>>
    + Send
    + Sync;

/// A policy from an async callback (a chat prompt to a human, a ticket
/// queue).
///
/// ```
/// use idem_runtime::approval::{Approval, ApprovalDecision, Callback};
///
/// let policy = Callback::new(|req| async move {
///     if req.tool == "delete_account" && req.namespace.as_str() == "staging" {
///         Ok(ApprovalDecision::Approved(Approval::granted_by("staging-bot")))
///     } else {
///         Ok(ApprovalDecision::Denied { reason: "needs a human".into() })
///     }
/// });
/// # let _ = policy;
/// ```
pub struct Callback(Box<DecideFn>);

impl Callback {
    /// Wrap `f`.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ApprovalDecision, String>> + Send + 'static,
    {
        Callback(Box::new(move |req| Box::pin(f(req))))
    }
}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Callback(..)")
    }
}

#[async_trait]
impl ApprovalPolicy for Callback {
    async fn decide(&self, request: &ApprovalRequest) -> Result<ApprovalDecision, String> {
        (self.0)(request.clone()).await
    }
}
