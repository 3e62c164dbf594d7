//! What a notification says: idem's JSON or Slack's blocks, and the
//! signature over it.
//!
//! The signature is Stripe's and GitHub's scheme: the header
//! `Idem-Signature: t=UNIX,v1=HEX`, where `HEX` is the HMAC-SHA256, keyed
//! by the endpoint's secret, of the Unix time `t`, a dot, and the body's
//! bytes. A receiver recomputes it, compares in constant time, and refuses
//! a `t` too far from its clock (a replay). Each attempt is signed afresh.

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use super::endpoint::{Format, Secret};
use super::event::{Event, Kind};
use crate::view::shown;

/// The header of the signature.
pub(crate) const SIGNATURE: &str = "idem-signature";

/// How many characters of a call's arguments a notification carries.
const ARGS: usize = 300;

/// The body of `event` in `format`; `inbox` is the inbox's origin
/// (`https://inbox.example.com`), the record's page its deep link.
pub(crate) fn body(event: &Event, format: Format, inbox: &str) -> Vec<u8> {
    let link = format!("{inbox}/records/{}", event.key);
    let value = match format {
        Format::Json => plain(event, &link),
        Format::Slack => slack(event, &link),
    };
    serde_json::to_vec(&value).expect("JSON serializes")
}

/// idem's own JSON: the event and the record's fields as recorded (JSON
/// escapes what needs it).
fn plain(event: &Event, link: &str) -> Value {
    let arguments = event
        .args
        .as_deref()
        .map(|a| serde_json::from_str::<Value>(a).unwrap_or_else(|_| Value::String(a.to_owned())));
    json!({
        "id": event.id,
        "event": event.kind.as_str(),
        "at": event.at.rfc3339(),
        "key": event.key,
        "tool": event.tool,
        "namespace": event.namespace,
        "state": event.state,
        "by": event.by,
        "reason": event.reason,
        "arguments": arguments,
        "call_id": event.asked.call_id,
        "run_id": event.asked.run_id,
        "step": event.asked.step,
        "why": event.why,
        "approvals": event.progress.as_ref().map(|p| p.json()),
        "escalate_to": event.escalate_to,
        "link": link,
    })
}

/// A Slack incoming webhook's message: a section saying what happened and
/// a button to the record's page. Record text is escaped for Slack's
/// mrkdwn, so an argument cannot write a link or a mention of its own.
fn slack(event: &Event, link: &str) -> Value {
    let tool = mrkdwn(&event.tool);
    let namespace = event
        .namespace
        .as_deref()
        .map(|n| format!(" in namespace {}", mrkdwn(n)))
        .unwrap_or_default();
    let headline = match (event.kind, event.state) {
        (Kind::Pending, _) => format!("*Awaiting approval:* {tool}{namespace}"),
        (Kind::Overdue, _) => format!("*Overdue, still awaiting approval:* {tool}{namespace}"),
        (Kind::Escalated, _) => format!("*Escalated, still awaiting approval:* {tool}{namespace}"),
        (Kind::Decided, state) => {
            let by = mrkdwn(event.by.as_deref().unwrap_or("somebody"));
            let what = match (state, &event.progress) {
                ("approved", _) => "Approved".to_owned(),
                ("denied", _) => "Denied".to_owned(),
                (_, Some(p)) => format!("Approval {} of {}", p.given, p.required),
                _ => "One approval added to".to_owned(),
            };
            format!("*{what}* by {by}: {tool}{namespace}")
        }
    };
    let mut text = headline.clone();
    if let Some(progress) = &event.progress {
        text.push_str(&format!("\nApprovals: {}", mrkdwn(&progress.words())));
    }
    if let Some(why) = &event.why {
        text.push_str(&format!(
            "\nWhy, in the caller's words: “{}”",
            mrkdwn(&idem_runtime::text::clip(why, ARGS))
        ));
    }
    if let Some(reason) = &event.reason {
        text.push_str(&format!(
            "\n“{}”",
            mrkdwn(&idem_runtime::text::clip(reason, ARGS))
        ));
    }
    if let Some(args) = &event.args {
        text.push_str(&format!(
            "\nArguments: {}",
            mrkdwn(&idem_runtime::text::clip(args, ARGS))
        ));
    }
    json!({
        // What a notification on a phone shows.
        "text": headline.replace('*', ""),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": "Open in the inbox"},
                "url": link,
            }]},
        ],
    })
}

/// `text` for Slack's mrkdwn: control characters escaped as everywhere,
/// and `&`, `<`, `>` as Slack asks, so that `<https://…|label>`,
/// `<@U123>` and `<!channel>` stay text.
pub(crate) fn mrkdwn(text: &str) -> String {
    shown(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The `Idem-Signature` value of `body` sent at Unix time `t`.
pub(crate) fn signature(secret: &Secret, t: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.bytes()).expect("HMAC takes any key");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_runtime::clock::Timestamp;

    fn event(args: &str) -> Event {
        Event {
            id: "evt_1".into(),
            kind: Kind::Pending,
            key: "ab".repeat(32),
            tool: "delete_account".into(),
            namespace: Some("tenant<a>".into()),
            state: "awaiting_approval",
            by: None,
            reason: None,
            at: Timestamp(1_700_000_000_000),
            args: Some(args.into()),
            asked: crate::notify::event::Asked {
                call_id: Some("call-7".into()),
                ..Default::default()
            },
            why: Some("the user said <@U123> asked for it".into()),
            progress: None,
            escalate_to: Vec::new(),
        }
    }

    #[test]
    fn slack_text_cannot_forge_a_link_or_a_mention() {
        let body = body(
            &event(r#"{"customer":"<https://evil.example|Approve> <!channel> & co"}"#),
            Format::Slack,
            "https://inbox.example.com",
        );
        let value: Value = serde_json::from_slice(&body).unwrap();
        let text = value["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert!(text.contains("&lt;https://evil.example|Approve&gt; &lt;!channel&gt; &amp; co"));
        assert!(text.contains("namespace tenant&lt;a&gt;"), "{text}");
        assert!(
            text.contains("“the user said &lt;@U123&gt; asked for it”"),
            "{text}"
        );
        assert_eq!(
            value["blocks"][1]["elements"][0]["url"],
            format!("https://inbox.example.com/records/{}", "ab".repeat(32))
        );
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_the_time_a_dot_and_the_body() {
        let secret = Secret::new(b"0123456789abcdef".to_vec());
        assert_eq!(
            signature(&secret, 1_700_000_000, b"{}"),
            "t=1700000000,v1=".to_owned() + OPENSSL
        );
    }

    /// `printf '1700000000.{}' | openssl dgst -sha256 -hmac 0123456789abcdef`
    const OPENSSL: &str = "e4f8e2ecae2295b2ddb2f0b5584c8275e226c0ebe9b3b819e70156bb67122e3e";

    #[test]
    fn every_body_says_n_of_m_who_approved_and_who_may_still_decide() {
        let mut added = event("{}");
        added.kind = Kind::Decided;
        added.state = "approval_added";
        added.by = Some("dana".into());
        added.progress = Some(crate::notify::progress::Progress {
            given: 1,
            required: 2,
            by: vec!["dana".into()],
            may_decide: Some(vec!["erin".into(), "frank".into()]),
            rule: Some("large refunds".into()),
        });
        let slack: Value =
            serde_json::from_slice(&body(&added, Format::Slack, "https://i.example")).unwrap();
        let text = slack["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(
            text.starts_with("*Approval 1 of 2* by dana: delete_account"),
            "{text}"
        );
        assert!(
            text.contains("Approvals: 1 of 2 approvals (dana); erin or frank may still approve"),
            "{text}"
        );
        let plain: Value =
            serde_json::from_slice(&body(&added, Format::Json, "https://i.example")).unwrap();
        assert_eq!(plain["approvals"]["text"], "1 of 2");
        assert_eq!(
            plain["approvals"]["approved_by"],
            serde_json::json!(["dana"])
        );
        assert_eq!(
            plain["approvals"]["may_still_decide"],
            serde_json::json!(["erin", "frank"])
        );
        assert_eq!(plain["approvals"]["rule"], "large refunds");
    }

    #[test]
    fn the_json_body_says_who_asked_and_why() {
        let body = body(&event("{}"), Format::Json, "https://inbox.example.com");
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["call_id"], "call-7");
        assert_eq!(value["run_id"], Value::Null);
        assert_eq!(value["why"], "the user said <@U123> asked for it");
    }
}
