//! Approvals asked of the person in the chat, through MCP elicitation: the
//! tool, its description and the exact arguments, accept or decline.
//!
//! Two forms, by the protocol version of the request:
//!
//! * **2026-07-28 and later** (multi round-trip): the call answers with an
//!   `InputRequiredResult` holding the question and a `requestState`
//!   sealed with HMAC-SHA256 (rmcp's `RequestStateCodec`), bound to the
//!   principal and the tool, and naming the record it asks about (its key
//!   and when it was created) and the fingerprint of the arguments as the
//!   client sent them. The client
//!   retries the call with the person's answer and the state; a state
//!   that was tampered with, is for another principal, tool or arguments,
//!   or has expired is refused. It is single-use because the record is:
//!   once decided, a decision for it is refused and the call is answered
//!   from the record.
//! * **Earlier versions**: an `elicitation/create` request to the client
//!   while the call waits.
//!
//! Accept records an approval (by the principal, or "the chat user", via
//! the client's name) and the call runs once; decline records a denial and
//! nothing runs; cancel leaves the call pending. The question is noted in
//! the audit log before it is asked (`asked`), and the same record is never
//! asked about twice.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequiredResult, InputResponses, ProtocolVersion, RequestStateCodec,
    SealOptions,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_runtime::approval::Approval;
use idem_runtime::operator::{Actor, Operator, OperatorError};
use idem_runtime::record::{Record, Status};

/// The id of the one input request of an approval round.
pub(crate) const APPROVAL_INPUT: &str = "idem_approval";

/// How long a person has to answer, and a sealed state stays valid.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(600);

/// What the client can do to ask its user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// Return an `InputRequiredResult` (protocol 2026-07-28 and later).
    InputRequired,
    /// Send `elicitation/create` and wait.
    Request,
}

/// How this request's client can be asked, if at all: it declared form
/// elicitation (an empty `elicitation` object is the older spelling).
pub(crate) fn form(context: &RequestContext<RoleServer>) -> Option<Form> {
    let capabilities = context.client_capabilities()?;
    let elicitation = capabilities.elicitation?;
    if elicitation.form.is_none() && elicitation.url.is_some() {
        return None;
    }
    match context.protocol_version() {
        Some(version) if version >= ProtocolVersion::V_2026_07_28 => Some(Form::InputRequired),
        _ => Some(Form::Request),
    }
}

/// The person's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Accept,
    Decline,
    /// Cancelled, dismissed, timed out, or the client could not ask.
    None,
}

impl From<ElicitationAction> for Answer {
    fn from(action: ElicitationAction) -> Self {
        match action {
            ElicitationAction::Accept => Answer::Accept,
            ElicitationAction::Decline => Answer::Decline,
            _ => Answer::None,
        }
    }
}

/// The question put to the person: the tool, what it does (its own
/// description, not what the server adds for the model), the exact
/// arguments it will run with (or that they are withheld), and the reason
/// the caller gave for the call, if any.
pub(crate) fn question(name: &str, description: &str, record: &Record) -> String {
    let arguments = match &record.info.args {
        Some(text) => serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| text.clone()),
        None => format!(
            "(withheld: this tool does not store its arguments; fingerprint {})",
            record.fingerprint
        ),
    };
    // The caller's words, escaped: a model's text cannot fake the lines
    // around it.
    let reason = match &record.info.reason {
        Some(reason) => format!(
            "\n\nThe reason given for it: {}",
            idem_runtime::text::visible(reason.as_str())
        ),
        None => String::new(),
    };
    format!(
        "Allow this action? It cannot be undone.\n\n{}: {}\n\nWith these arguments:\n{}{reason}\n\n\
         Accept runs it once. Decline means it does not run.",
        name,
        description.trim(),
        arguments
    )
}

/// The elicitation request: a form with no fields, accept or decline.
pub(crate) fn request(message: String) -> ElicitRequestParams {
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    }
}

/// Ask with `elicitation/create` and wait for the answer.
pub(crate) async fn ask_now(context: &RequestContext<RoleServer>, message: String) -> Answer {
    match context
        .peer
        .create_elicitation_with_timeout(request(message), Some(ANSWER_WITHIN))
        .await
    {
        Ok(result) => result.action.into(),
        Err(e) => {
            tracing::warn!(error = %e, "the chat client did not answer the approval question");
            Answer::None
        }
    }
}

/// What a sealed request state names: the record asked about.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Asking {
    key: String,
    fingerprint: String,
    created_at: u64,
}

/// Seals and opens request states; one per server (a fleet behind a load
/// balancer shares its secret: [`McpServer::request_state_secret`]).
///
/// [`McpServer::request_state_secret`]: crate::McpServer::request_state_secret
#[derive(Clone)]
pub(crate) struct States {
    codec: RequestStateCodec,
}

impl std::fmt::Debug for States {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("States(…)")
    }
}

impl States {
    /// With a random secret of this process.
    pub(crate) fn random() -> Self {
        let mut secret = [0u8; 32];
        rand::fill(&mut secret);
        States::with_secret(&secret).expect("32 bytes are enough")
    }

    /// With `secret` (at least 32 bytes).
    pub(crate) fn with_secret(secret: &[u8]) -> Result<Self, String> {
        RequestStateCodec::try_new(secret.to_vec())
            .map(|codec| States { codec })
            .map_err(|e| e.to_string())
    }

    /// A task id: `ticket`, sealed and bound to `principal`.
    pub(crate) fn seal_ticket(
        &self,
        ticket: &crate::tasks::Ticket,
        principal: Option<&str>,
    ) -> String {
        let bound = format!("idem-task\0{}", principal.unwrap_or("")).into_bytes();
        self.codec
            .seal_json_with(ticket, &SealOptions::new().associated_data(&bound))
            .expect("a ticket serializes")
    }

    /// The ticket a task id names, if this server sealed it for
    /// `principal`.
    pub(crate) fn open_ticket(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> Result<crate::tasks::Ticket, String> {
        let bound = format!("idem-task\0{}", principal.unwrap_or("")).into_bytes();
        self.codec.open_json_with(id, &bound).map_err(|e| {
            format!(
                "this server does not know task `{id}` ({e}): it is another caller's, or was \
                 made by a server with another request-state secret"
            )
        })
    }

    /// The associated data a state is bound to.
    fn bound_to(principal: Option<&str>, tool: &str) -> Vec<u8> {
        format!("idem-approval\0{}\0{tool}", principal.unwrap_or("")).into_bytes()
    }

    /// The input-required answer that asks about `record`, for the call
    /// whose arguments as sent have `fingerprint`.
    pub(crate) fn ask_later(
        &self,
        message: String,
        record: &Record,
        fingerprint: &str,
        principal: Option<&str>,
        tool: &str,
    ) -> InputRequiredResult {
        let asking = Asking {
            key: record.key.as_str().to_owned(),
            fingerprint: fingerprint.to_owned(),
            created_at: record.created_at.as_millis(),
        };
        let bound = Self::bound_to(principal, tool);
        let state = self
            .codec
            .seal_json_with(
                &asking,
                &SealOptions::new()
                    .associated_data(&bound)
                    .ttl(ANSWER_WITHIN),
            )
            .expect("a key and numbers serialize");
        let mut requests = BTreeMap::new();
        requests.insert(
            APPROVAL_INPUT.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(request(message))),
        );
        InputRequiredResult::new(Some(requests), Some(state))
    }

    /// The record a returned state asks about and the person's answer, or
    /// why the state is refused.
    pub(crate) fn answered(
        &self,
        state: &str,
        responses: Option<&InputResponses>,
        principal: Option<&str>,
        tool: &str,
    ) -> Result<(String, String, u64, Answer), String> {
        let bound = Self::bound_to(principal, tool);
        let asking: Asking = self.codec.open_json_with(state, &bound).map_err(|e| {
            format!("the approval answer could not be verified ({e}): it is for another call, was changed, or expired")
        })?;
        let answer = responses
            .and_then(|r| r.get(APPROVAL_INPUT))
            .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
            .map_or(Answer::None, |r| r.action.into());
        Ok((asking.key, asking.fingerprint, asking.created_at, answer))
    }
}

/// Who answers in the chat.
#[derive(Debug, Clone)]
pub(crate) struct ChatUser {
    /// The principal as authenticated, or "the chat user": the name an
    /// approval is recorded under and the approval rules judge.
    pub(crate) name: String,
    /// The client they answer in, if it said.
    pub(crate) client: Option<String>,
}

impl std::fmt::Display for ChatUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.client {
            Some(client) => write!(f, "{} (in {client})", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Record the person's answer about `record`, if it is still the request
/// they were asked about (awaiting approval, the same arguments, created
/// when it was): accept approves, decline denies, no answer notes that
/// they were asked. A record decided meanwhile is left as it is, and the
/// call is answered from it.
///
/// The approval rules in force on the store judge the answer as they
/// judge every decision: an acceptance they refuse (the person asked for
/// the call themselves under `forbid_self_approval`, is not an approver,
/// or is one of several approvals needed) decides nothing more than they
/// allow, and a refusal is written in the audit log with its reason.
pub(crate) async fn record_answer(
    operator: &Operator,
    record: &Record,
    answer: Answer,
    who: &ChatUser,
) -> Result<(), OperatorError> {
    if record.status() != Status::AwaitingApproval {
        return Ok(());
    }
    let via = who
        .client
        .as_deref()
        .map_or(String::new(), |c| format!(" ({c})"));
    let decided = match answer {
        Answer::Accept => operator
            .approve_record(
                record,
                Approval::granted_by(who.name.clone())
                    .with_note(format!("approved in the chat{via}")),
            )
            .await
            .map(drop),
        Answer::Decline => operator
            .deny_record(record, &who.name, &format!("declined in the chat{via}"))
            .await
            .map(drop),
        Answer::None => return Ok(()),
    };
    match decided {
        // Someone else decided first: their decision stands.
        Err(OperatorError::Changed { .. }) => Ok(()),
        Err(OperatorError::Rule(refused)) => {
            tracing::warn!(reason = %refused, "the approval rules refused the chat user's answer");
            operator
                .note_asked(
                    record,
                    &Actor::new(who.to_string())
                        .because(format!("the answer in the chat was refused: {refused}")),
                )
                .await
        }
        other => other,
    }
}

/// Note before asking that `who` asks about `record`.
pub(crate) async fn note_asked(
    operator: &Operator,
    record: &Record,
    who: &str,
) -> Result<(), OperatorError> {
    operator
        .note_asked(
            record,
            &Actor::new(who).because("asked the person in the chat to approve"),
        )
        .await
}
