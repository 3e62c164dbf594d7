//! How records are shown: tables and descriptions for people (`table`,
//! `describe`, coloured by `style`), the stable JSON schema for scripts
//! (`json`). Commands decide what to show; this folder only shapes it.
//! Whatever a record holds reaches a person through
//! `idem_runtime::text::visible`.

pub(crate) mod describe;
pub(crate) mod json;
pub(crate) mod style;
pub(crate) mod table;

pub(crate) use idem_runtime::text::clip;

use idem_runtime::clock::Timestamp;
use idem_runtime::record::{Outcome, Record, RecordState, Status};

use crate::time::relative;

/// How many digits of a key tables show (unique in practice, and accepted
/// back as a prefix).
pub(crate) const SHORT_KEY: usize = 12;

/// The first [`SHORT_KEY`] digits of a key.
pub(crate) fn short_key(key: &str) -> &str {
    &key[..SHORT_KEY.min(key.len())]
}

/// One line saying where a record stands beyond its state: the lease of a
/// call in flight, what an approval waits for, the outcome; the record's
/// text in it escaped ([`visible`](idem_runtime::text::visible)).
pub(crate) fn summary(record: &Record, now: Timestamp) -> String {
    let line = match (&record.state, record.status()) {
        (RecordState::InFlight { .. }, _) if record.outlast().is_some() => {
            let until = record.outlast().map_or(now, |wait| wait.until);
            format!(
                "owner vanished; waiting out its attempt (over {}), then reconciling (idem resolve ends the wait)",
                relative(now, until)
            )
        }
        (RecordState::InFlight { lease_until, .. }, _) if record.lease_expired(now) => format!(
            "lease ran out {}: the owner vanished",
            relative(now, *lease_until)
        ),
        (RecordState::InFlight { lease_until, .. }, _) => {
            format!("running; lease until {}", relative(now, *lease_until))
        }
        (_, Status::Approved) => match record.approval() {
            Some(a) => format!("approved by {}; runs on the next call", a.approver),
            None => "approved; runs on the next call".to_owned(),
        },
        (RecordState::AwaitingApproval { message, .. }, _) => message.clone(),
        (
            RecordState::Completed {
                outcome,
                completed_at,
                ..
            },
            _,
        ) => match outcome {
            Outcome::Success { output } => format!("→ {}", output.as_str()),
            Outcome::Failure { failure } => format!("{}: {}", failure.code, failure.message),
            Outcome::Unknown { reason } => format!(
                "waiting for a person for {}: {reason}",
                crate::time::age(now, *completed_at)
            ),
        },
    };
    idem_runtime::text::visible(&line).into_owned()
}
