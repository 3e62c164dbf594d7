//! Decisions, as the page and the JSON API make them: check the input,
//! check that the record is still the version the person saw, then act
//! through the operator API on exactly that version.

use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::audit::{AuditEvent, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::operator::{Actor, Approving, Operator, OperatorError, Resolution};
use idem_runtime::record::Record;
use serde_json::Value;

use super::approvers::Identity;
use super::rules::{Act, Allowed, Rules};
use super::view::{arguments_in_words, shown, what_changed, Seen, Waits};
use idem_runtime::store::StoreExt;

/// The longest note or reason kept with a decision, in bytes: it is
/// shown on pages and told to every later call.
pub(super) const MAX_TEXT: usize = 4096;

/// A decision, as asked for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    /// Let the call run once.
    Approve {
        /// An optional note.
        note: Option<String>,
    },
    /// Never let it run.
    Deny {
        /// Why (required).
        reason: String,
    },
    /// Settle an unknown outcome (or a vanished owner's call).
    Resolve {
        /// How.
        resolution: Resolution,
        /// Why (required).
        reason: String,
        /// How long the resolution is kept, instead of the tool's TTL.
        ttl: Option<Duration>,
    },
}

/// The fields of a decision form (`application/x-www-form-urlencoded`):
/// the token, the confirmation and the decision's fields, with the output
/// as JSON text.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct FormFields {
    /// The CSRF token.
    pub csrf: String,
    /// The browser key the inbox's script adds (`App::same_browser`).
    pub browser: String,
    /// `yes` once the person confirmed the restated effect.
    pub confirmed: Option<String>,
    /// The decision's fields, the output as JSON text.
    #[serde(flatten)]
    pub asked: Asked<String>,
}

/// The fields of a decision: a JSON body's, or (`Output` the output's
/// JSON text) a form's.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct Asked<Output = Value> {
    /// The version shown ([`Seen::token`]).
    pub version: String,
    /// Approve: the note.
    pub note: Option<String>,
    /// Deny, resolve: why.
    pub reason: Option<String>,
    /// Resolve: `succeeded`, `failed` or `released`.
    #[serde(rename = "as")]
    pub resolution: Option<String>,
    /// Resolve as succeeded: the output.
    pub output: Option<Output>,
    /// Resolve as succeeded or failed: how long to keep it (`30d`, `90d`,
    /// `1w`), instead of the tool's TTL. Empty: the tool's.
    pub ttl: Option<String>,
    /// Edit (the JSON API's `POST …/edit`): the arguments the call runs
    /// with instead.
    pub arguments: Option<Value>,
}

/// Why a decision was not made. Nothing was changed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Refused {
    /// The input is incomplete or malformed (HTTP 422).
    Invalid(String),
    /// The query asks for something that does not exist (HTTP 400).
    BadQuery(String),
    /// The record changed since the person saw it (HTTP 409).
    Changed(String),
    /// The record is not in a state this decision applies to (HTTP 409).
    NotApplicable(String),
    /// The viewer role may not decide (HTTP 403).
    Forbidden,
    /// An approval rule does not let this person make this decision
    /// (HTTP 403).
    Rule(String),
    /// This person approved the call already; the next approval must be
    /// someone else's (HTTP 409).
    ApprovedBefore(String),
    /// The store failed (HTTP 503). The detail goes to the server's log,
    /// not to the page: store errors can name hosts.
    Store(String),
}

impl Refused {
    /// A code for programs.
    pub(super) fn code(&self) -> &'static str {
        match self {
            Refused::Invalid(_) => "invalid",
            Refused::BadQuery(_) => "bad_request",
            Refused::Changed(_) => "changed",
            Refused::NotApplicable(_) => "not_applicable",
            Refused::Forbidden => "forbidden",
            Refused::Rule(_) => "rule",
            Refused::ApprovedBefore(_) => "approved_before",
            Refused::Store(_) => "store",
        }
    }

    /// The HTTP status.
    pub(super) fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Refused::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Refused::BadQuery(_) => StatusCode::BAD_REQUEST,
            Refused::Changed(_) | Refused::NotApplicable(_) | Refused::ApprovedBefore(_) => {
                StatusCode::CONFLICT
            }
            Refused::Forbidden | Refused::Rule(_) => StatusCode::FORBIDDEN,
            Refused::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// What to tell the person, ending with what was (not) changed.
    pub(super) fn message(&self) -> String {
        let text = match self {
            Refused::BadQuery(m) => return m.clone(),
            Refused::Invalid(m)
            | Refused::Changed(m)
            | Refused::NotApplicable(m)
            | Refused::Rule(m)
            | Refused::ApprovedBefore(m) => m.clone(),
            Refused::Forbidden => {
                "You are signed in as a viewer: you can see records but not decide them.".to_owned()
            }
            Refused::Store(_) => {
                "The store could not be read or written; try again in a moment.".to_owned()
            }
        };
        format!("{text} Nothing was changed.")
    }
}

impl Asked {
    /// The decision `action` (`approve`, `deny`, `resolve`) with these
    /// fields, checked.
    pub(super) fn decision(&self, action: &str) -> Result<Decision, Refused> {
        for (field, text) in [("note", &self.note), ("reason", &self.reason)] {
            let length = text.as_deref().map_or(0, str::len);
            if length > MAX_TEXT {
                return Err(Refused::Invalid(format!(
                    "The {field} is {length} bytes; it may be at most {} KiB. Keep it short and link to the details.",
                    MAX_TEXT / 1024
                )));
            }
        }
        let reason = || {
            self.reason
                .as_deref()
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
        };
        match action {
            "approve" => Ok(Decision::Approve {
                note: self
                    .note
                    .as_deref()
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned),
            }),
            "deny" => Ok(Decision::Deny {
                reason: reason().ok_or_else(|| {
                    Refused::Invalid(
                        "A denial needs a reason: every later call with this key is told it."
                            .into(),
                    )
                })?,
            }),
            "resolve" => {
                let reason = reason().ok_or_else(|| {
                    Refused::Invalid(
                        "Say why you know how it ended: the reason is kept in the audit log."
                            .into(),
                    )
                })?;
                let resolution = match self.resolution.as_deref().map(str::trim) {
                    Some("succeeded") => Resolution::Succeeded(self.output_value()?),
                    Some("failed") => Resolution::Failed(reason.clone()),
                    Some("released") => Resolution::Release,
                    Some(other) => {
                        return Err(Refused::Invalid(format!(
                            "Unknown resolution “{}”: choose succeeded, failed or released.",
                            shown(other)
                        )))
                    }
                    None => return Err(Refused::Invalid(
                        "Choose how the call ended: succeeded, failed, or released to run again."
                            .into(),
                    )),
                };
                let ttl = self.kept_for(&resolution)?;
                Ok(Decision::Resolve {
                    resolution,
                    reason,
                    ttl,
                })
            }
            other => Err(Refused::Invalid(format!(
                "Unknown action “{}”.",
                shown(other)
            ))),
        }
    }

    /// How long a resolution is kept, when the person said (`ttl`): a
    /// duration idem reads, at least a minute; never for a release, which
    /// keeps nothing.
    fn kept_for(&self, resolution: &Resolution) -> Result<Option<Duration>, Refused> {
        let Some(text) = self.ttl.as_deref().map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        if matches!(resolution, Resolution::Release) {
            return Err(Refused::Invalid(
                "A release keeps no record, so it has nothing to keep for a time: leave “keep for” empty.".into(),
            ));
        }
        match idem_runtime::text::parse_duration(text) {
            Some(ttl) if ttl >= Duration::from_secs(60) => Ok(Some(ttl)),
            _ => Err(Refused::Invalid(format!(
                "“{}” is not a time to keep the resolution for: write a number and a unit of at least a minute, such as 30d, 12w or 8h.",
                shown(text)
            ))),
        }
    }

    /// The output of a call resolved as succeeded.
    fn output_value(&self) -> Result<Value, Refused> {
        self.output.clone().ok_or_else(|| {
            Refused::Invalid("Give the output every repeat of the call will get (JSON).".into())
        })
    }

    /// The fields of a form, whose output is JSON text: it must parse.
    pub(super) fn from_form(form: Asked<String>) -> Result<Asked, Refused> {
        let output = match form.output.as_deref().map(str::trim) {
            Some(text) if !text.is_empty() && form.resolution.as_deref() == Some("succeeded") => {
                Some(serde_json::from_str(text).map_err(|e| {
                    Refused::Invalid(format!(
                        "The output must be the tool's output as JSON ({e}); write text in quotes: \"done\"."
                    ))
                })?)
            }
            _ => None,
        };
        Ok(Asked {
            version: form.version,
            note: form.note,
            reason: form.reason,
            resolution: form.resolution,
            output,
            ttl: form.ttl,
            // The pages have no edit form.
            arguments: None,
        })
    }

    /// The version the person saw.
    pub(super) fn seen(&self) -> Result<Seen, Refused> {
        Seen::parse(&self.version).ok_or_else(|| {
            Refused::Invalid(
                "The version of the record you decided on is missing: open the record and decide from there.".into(),
            )
        })
    }
}

/// What the approval rules say about `who` making `decision` on
/// `record`: refused when a rule does not let them; `None` for a
/// resolution, which the rules do not govern.
pub(super) fn allowed(
    rules: &Rules,
    record: &Record,
    decision: &Decision,
    who: &Identity,
) -> Result<Option<Allowed>, Refused> {
    let act = match decision {
        Decision::Approve { .. } => Act::Approve,
        Decision::Deny { .. } => Act::Deny,
        Decision::Resolve { .. } => return Ok(None),
    };
    let allowed = rules
        .allows(record, &who.name, act)
        .map_err(|refused| Refused::Rule(shown(&refused.to_string())))?;
    if act == Act::Approve {
        let given = record.approvals();
        if given.iter().any(|g| g.approval.approver == who.name) {
            return Err(Refused::ApprovedBefore(approved_before(
                &who.name,
                given.len(),
                &allowed,
            )));
        }
    }
    Ok(Some(allowed))
}

/// Why `who` may not approve again, and who may.
fn approved_before(who: &str, given: usize, allowed: &Allowed) -> String {
    format!(
        "You ({}) approved this call already: it has {given} of the {} approvals {} needs, and the next must come from {}.",
        shown(who),
        allowed.required,
        allowed
            .rule
            .as_ref()
            .map_or("it".to_owned(), |r| format!("rule “{}”", shown(r))),
        shown(&allowed.others),
    )
}

/// Which approval this would be (`1 of 2`), when the call needs more than
/// one and this is not the last.
fn partial<'a>(record: &Record, allowed: Option<&'a Allowed>) -> Option<(usize, &'a Allowed)> {
    let allowed = allowed?;
    let this = record.approvals().len() + 1;
    (this < allowed.required).then_some((this, allowed))
}

/// The effect of `decision` on `record`, restated for a confirmation
/// (`allowed`: what the rules said of it).
pub(super) fn effect(decision: &Decision, record: &Record, allowed: Option<&Allowed>) -> String {
    let tool = shown(&record.tool);
    let args = arguments_in_words(record);
    match decision {
        Decision::Approve { .. } if partial(record, allowed).is_some() => {
            let (this, allowed) = partial(record, allowed).expect("checked");
            format!(
                "This is approval {this} of {} under rule “{}”: nothing runs yet. {tool} runs once, with exactly these arguments, when {} approves too: {args}.",
                allowed.required,
                shown(allowed.rule.as_deref().unwrap_or_default()),
                shown(&allowed.others),
            )
        }
        Decision::Approve { .. } => format!(
            "{tool} will run once, with exactly these arguments: {args}. A caller waiting for this decision runs it now; otherwise the next call with this key does."
        ),
        Decision::Deny { reason } => format!(
            "{tool} will never run under this key ({args}). Every call with the key is told: “{}”.",
            shown(reason)
        ),
        Decision::Resolve {
            resolution, ttl, ..
        } => match resolution {
            Resolution::Succeeded(output) => format!(
                "The call of {tool} ({args}) is recorded as having happened. Nothing runs; every repeat of it gets this output: {}. {}",
                shown(&output.to_string()),
                kept(record, *ttl, &tool)
            ),
            Resolution::Failed(reason) => format!(
                "The call of {tool} ({args}) is recorded as not having happened, and it is not tried again under this key. Every repeat is told: “{}”. {}",
                shown(reason),
                kept(record, *ttl, &tool)
            ),
            Resolution::Release => format!(
                "The record is deleted, and the next call with this key runs {tool} again ({args}). Do this only if you know the effect did not happen."
            ),
        },
    }
}

/// How long a resolution is kept, in words: like every outcome, a
/// resolution lapses, and then a call with the key runs the tool again.
fn kept(record: &Record, ttl: Option<Duration>, tool: &str) -> String {
    let (span, whose) = match (ttl, record.info.ttl) {
        (Some(ttl), _) => (ttl, "as you chose"),
        (None, Some(tool_ttl)) => (tool_ttl, "the tool's TTL; choose another with “keep for”"),
        (None, None) => {
            return format!(
                "It is kept as long as the tool keeps its outcomes; after that, a call with this key runs {tool} again."
            )
        }
    };
    format!(
        "It is kept for {} ({whose}); after that, a call with this key runs {tool} again.",
        idem_runtime::text::duration::exact(span)
    )
}

/// What a decision did, for the notice after it.
pub(super) fn done(decision: &Decision) -> &'static str {
    match decision {
        Decision::Approve { .. } => "approved",
        Decision::Deny { .. } => "denied",
        Decision::Resolve { resolution, .. } => match resolution {
            Resolution::Succeeded(_) => "resolved as succeeded",
            Resolution::Failed(_) => "resolved as failed",
            Resolution::Release => "released",
        },
    }
}

/// The record under `key` as the person saw it: refused with what changed
/// when it is not that version any more, or when the decision does not
/// apply to it.
pub(super) async fn current(
    operator: &Operator,
    key: &IdempotencyKey,
    seen: &Seen,
    decision: &Decision,
) -> Result<Record, Refused> {
    let record = operator.store().get(key).await.map_err(store)?;
    let now = operator.store().now().await.map_err(store)?;
    match record {
        Some(record) if Seen::of(&record) == *seen => {
            let waits = Waits::of(&record, now);
            let applies = match decision {
                Decision::Approve { .. } | Decision::Deny { .. } => waits == Some(Waits::Approval),
                Decision::Resolve { .. } => {
                    matches!(waits, Some(Waits::Unknown | Waits::Vanished))
                }
            };
            if !applies {
                return Err(Refused::NotApplicable(format!(
                    "This record is {}; {} does not apply to it.",
                    super::view::state_words(&record),
                    done(decision)
                )));
            }
            Ok(record)
        }
        other => {
            let log = trail(operator, key).await.unwrap_or_default();
            Err(Refused::Changed(what_changed(
                seen,
                other.as_ref(),
                &log,
                now,
            )))
        }
    }
}

/// What a decision did.
#[derive(Debug, Clone)]
pub(super) struct Decided {
    /// The record as written (`None`: deleted).
    pub record: Option<Record>,
    /// In words: `approved`, `approval 1 of 2 recorded …`.
    pub done: String,
    /// Approvals the call has and needs, when it needs more than one.
    pub approvals: Option<(usize, usize)>,
}

/// Make `decision` on `record` (the version the person saw) as `who`,
/// under the approval `rules`.
pub(super) async fn decide(
    operator: &Operator,
    rules: &Rules,
    record: &Record,
    decision: &Decision,
    who: &Identity,
) -> Result<Decided, Refused> {
    if who.role != crate::role::Role::Approver {
        return Err(Refused::Forbidden);
    }
    let allowed = allowed(rules, record, decision, who)?;
    let decided = |record: Option<Record>| Decided {
        record,
        done: done(decision).to_owned(),
        approvals: None,
    };
    let result = match decision {
        Decision::Approve { note } => {
            let mut approval = Approval::granted_by(who.name.clone());
            if let Some(note) = note {
                approval = approval.with_note(note.clone());
            }
            let required = allowed.as_ref().map_or(1, |a| a.required);
            operator
                .add_approval(record, approval, required)
                .await
                .map(|approving| match approving {
                    Approving::Recorded {
                        record,
                        given,
                        required,
                    } => Decided {
                        record: Some(record),
                        done: format!(
                            "approval {given} of {required} recorded; it runs once {} approves too",
                            shown(allowed.as_ref().map_or("another approver", |a| &a.others))
                        ),
                        approvals: Some((given, required)),
                    },
                    Approving::Granted(after) => Decided {
                        approvals: (required > 1).then_some((required, required)),
                        ..decided(Some(after))
                    },
                    other => decided(Some(other.record().clone())),
                })
        }
        Decision::Deny { reason } => operator
            .deny_record(record, &who.name, reason)
            .await
            .map(|r| decided(Some(r))),
        Decision::Resolve {
            resolution,
            reason,
            ttl,
        } => {
            let actor = Actor::new(who.name.clone()).because(reason.clone());
            let resolved = match ttl {
                Some(ttl) => {
                    operator
                        .resolve_record_kept_for(record, resolution.clone(), &actor, *ttl)
                        .await
                }
                None => {
                    operator
                        .resolve_record(record, resolution.clone(), &actor)
                        .await
                }
            };
            resolved.map(decided)
        }
    };
    match result {
        Ok(decided) => Ok(decided),
        Err(OperatorError::ApprovedBefore { given, .. }) => {
            let allowed = allowed.unwrap_or(Allowed {
                rule: None,
                required: given + 1,
                others: "another approver".into(),
            });
            Err(Refused::ApprovedBefore(approved_before(
                &who.name, given, &allowed,
            )))
        }
        Err(OperatorError::Changed { key }) => {
            // Changed between the check and the swap.
            let now_record = operator.store().get(&key).await.map_err(store)?;
            let now = operator.store().now().await.map_err(store)?;
            let log = trail(operator, &key).await.unwrap_or_default();
            Err(Refused::Changed(what_changed(
                &Seen::of(record),
                now_record.as_ref(),
                &log,
                now,
            )))
        }
        Err(OperatorError::Store(e)) => Err(store(e)),
        // The rules in force on the store, which another instance may
        // have published since this one read its file.
        Err(OperatorError::Rule(refused)) => Err(Refused::Rule(shown(&refused.to_string()))),
        Err(e) => Err(Refused::NotApplicable(format!(
            "{}.",
            shown(&e.to_string())
        ))),
    }
}

/// What a record's page (and the API's record) shows: the record under
/// `key` (`None`: gone), the store's time, and the key's audit trail.
pub(super) async fn read(
    operator: &Operator,
    key: &IdempotencyKey,
) -> Result<(Option<Record>, Timestamp, Vec<AuditEvent>), Refused> {
    let record = operator.store().get(key).await.map_err(store)?;
    let now = operator.store().now().await.map_err(store)?;
    Ok((record, now, trail(operator, key).await?))
}

/// The store's audit log for `key`, oldest first (at most 200 events).
pub(super) async fn trail(
    operator: &Operator,
    key: &IdempotencyKey,
) -> Result<Vec<AuditEvent>, Refused> {
    let page = operator
        .audit(&AuditQuery::for_key(key.clone()), None, 200)
        .await
        .map_err(read_failed)?;
    Ok(page.events)
}

/// An operator read that failed (only the store can fail a read).
pub(super) fn read_failed(e: OperatorError) -> Refused {
    match e {
        OperatorError::Store(e) => store(e),
        e => Refused::Store(e.to_string()),
    }
}

/// A store error, logged on stderr; the page gets only that the store
/// failed (its text can name hosts).
pub(super) fn store(e: idem_runtime::store::StoreError) -> Refused {
    eprintln!("idem serve: store error: {e}");
    Refused::Store(e.to_string())
}
