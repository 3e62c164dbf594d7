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
use sha2::{Digest, Sha256};

use super::endpoint::{Format, Secret};
use super::event::{Event, Kind};
use crate::view::shown;

/// The header of the signature.
pub(crate) const SIGNATURE: &str = "idem-signature";

/// How many characters of a call's arguments a notification carries.
const ARGS: usize = 300;

/// The body of `event` in `format`; `inbox` is the inbox's origin
/// (`https://inbox.example.com`), the record's page its deep link.
/// `buttons`: Slack messages carry Approve and Deny
/// ([`slack_message`]).
pub(crate) fn body(event: &Event, format: Format, inbox: &str, buttons: bool) -> Vec<u8> {
    let link = format!("{inbox}/records/{}", event.key);
    let value = match format {
        Format::Json => plain(event, &link),
        Format::Slack => slack_message(event, &link, buttons),
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

/// A Slack message: a section of idem's own words (what happened, "N of
/// M", who may still decide), a section of the caller's words (the tool,
/// namespace, why, reason, arguments), and the buttons: to the record's
/// page and, while the call waits and `buttons` is on (Slack's
/// interactivity is set up: `idem serve --slack-signing-secret-file`),
/// Approve and Deny.
///
/// The caller's words are a `plain_text` object, which Slack renders as
/// typed: no `*bold*`, `_italic_`, `~strike~` or backticks, no
/// `<url|label>` links and no `<!channel>` or `<@U…>` mentions, which only
/// mrkdwn reads; with `&`, `<` and `>` escaped as Slack asks of every
/// text, and `://` written `[:]//` so that no client makes a bare URL a
/// link ([`inert`]). idem's own words are mrkdwn, `verbatim` (no
/// automatic links or mentions), the few names in them escaped
/// ([`mrkdwn`]).
pub(crate) fn slack_message(event: &Event, link: &str, buttons: bool) -> Value {
    let headline = match (event.kind, event.state) {
        (Kind::Pending, _) => "*Awaiting approval*".to_owned(),
        (Kind::Overdue, _) => "*Overdue, still awaiting approval*".to_owned(),
        (Kind::Escalated, _) => "*Escalated, still awaiting approval*".to_owned(),
        (Kind::Decided, state) => {
            let by = mrkdwn(event.by.as_deref().unwrap_or("somebody"));
            let what = match (state, &event.progress) {
                ("approved", _) => "Approved".to_owned(),
                ("denied", _) => "Denied".to_owned(),
                (_, Some(p)) => format!("Approval {} of {}", p.given, p.required),
                _ => "One approval added".to_owned(),
            };
            format!("*{what}* by {by}")
        }
    };
    let mut ours = headline.clone();
    if let Some(progress) = &event.progress {
        ours.push_str(&format!("\nApprovals: {}", mrkdwn(&progress.words())));
    }
    let mut theirs = format!("Tool: {}", event.tool);
    if let Some(namespace) = &event.namespace {
        theirs.push_str(&format!("\nNamespace: {namespace}"));
    }
    let clipped = |text: &str| idem_runtime::text::clip(text, ARGS);
    if let Some(why) = &event.why {
        theirs.push_str(&format!("\nWhy, in the caller's words: “{}”", clipped(why)));
    }
    if let Some(reason) = &event.reason {
        theirs.push_str(&format!("\n“{}”", clipped(reason)));
    }
    if let Some(args) = &event.args {
        theirs.push_str(&format!("\nArguments: {}", clipped(args)));
    }
    let mut elements = vec![json!({
        "type": "button",
        "text": {"type": "plain_text", "text": "Open in the inbox"},
        "url": link,
    })];
    if let (true, Some(value)) = (buttons, button_value(event)) {
        elements.push(button(APPROVE, "primary", "Approve", &value));
        let mut deny = button(DENY, "danger", "Deny", &value);
        deny["confirm"] = json!({
            "title": {"type": "plain_text", "text": "Deny this call?"},
            "text": {"type": "plain_text", "text": "It will never run under this key; the caller is told it was denied in Slack."},
            "confirm": {"type": "plain_text", "text": "Deny"},
            "deny": {"type": "plain_text", "text": "Cancel"},
        });
        elements.push(deny);
    }
    json!({
        // What a notification on a phone shows: idem's words only.
        "text": headline.replace('*', ""),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": ours, "verbatim": true}},
            {"type": "section", "text": {"type": "plain_text", "text": inert(&theirs), "emoji": false}},
            {"type": "actions", "elements": elements},
        ],
    })
}

/// A decision button.
fn button(action_id: &str, style: &str, text: &str, value: &str) -> Value {
    json!({
        "type": "button",
        "action_id": action_id,
        "style": style,
        "text": {"type": "plain_text", "text": text},
        "value": value,
    })
}

/// The `action_id` of the Approve button.
pub(crate) const APPROVE: &str = "idem_approve";
/// The `action_id` of the Deny button.
pub(crate) const DENY: &str = "idem_deny";

/// What a decision button carries: the record's key and the digest of
/// the arguments' fingerprint it was shown with (`KEY:HEX`), so that a
/// click decides on exactly those arguments; `None` once decided.
fn button_value(event: &Event) -> Option<String> {
    let fingerprint = event.fingerprint.as_deref()?;
    Some(format!("{}:{}", event.key, arguments_digest(fingerprint)))
}

/// The SHA-256 (hex) of a record's fingerprint, as a button carries it.
pub(crate) fn arguments_digest(fingerprint: &str) -> String {
    hex::encode(Sha256::digest(fingerprint.as_bytes()))
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

/// A caller's text for a `plain_text` object: [`mrkdwn`]'s escapes, and
/// every `://` written `[:]//`, so that a bare URL is shown, not linked.
pub(crate) fn inert(text: &str) -> String {
    mrkdwn(text).replace("://", "[:]//")
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
            fingerprint: Some("f00d".into()),
            escalate_to: Vec::new(),
        }
    }

    /// The blocks of `event`'s Slack message: idem's words, the caller's,
    /// the buttons.
    fn slack_blocks(event: &Event, buttons: bool) -> (String, String, Vec<Value>) {
        let body = body(event, Format::Slack, "https://inbox.example.com", buttons);
        let value: Value = serde_json::from_slice(&body).unwrap();
        let ours = &value["blocks"][0]["text"];
        assert_eq!(
            (ours["type"].as_str(), ours["verbatim"].as_bool()),
            (Some("mrkdwn"), Some(true))
        );
        let theirs = &value["blocks"][1]["text"];
        assert_eq!(
            (theirs["type"].as_str(), theirs["emoji"].as_bool()),
            (Some("plain_text"), Some(false))
        );
        assert!(!value["text"].as_str().unwrap().contains("evil"), "{value}");
        (
            ours["text"].as_str().unwrap().to_owned(),
            theirs["text"].as_str().unwrap().to_owned(),
            value["blocks"][2]["elements"].as_array().unwrap().clone(),
        )
    }

    /// Issue 50 point 7: a caller's reason and arguments cannot write a
    /// link, a mention or formatting into a Slack message.
    #[test]
    fn slack_text_cannot_forge_a_link_a_mention_or_formatting() {
        let hostile = r#"{"customer":"<https://evil.example|Approve> <!channel> <!here> <@U123> & co","note":"*bold* _it_ ~s~ `code` ```block``` https://evil.example/pay www.evil.example"}"#;
        let mut event = event(hostile);
        event.reason = Some("<http://x|click here> *now*".into());
        let (ours, theirs, _) = slack_blocks(&event, false);
        // idem's own words carry nothing of the caller's.
        assert_eq!(ours, "*Awaiting approval*", "{ours}");
        for hostile_part in [
            "&lt;https[:]//evil.example|Approve&gt; &lt;!channel&gt; &lt;!here&gt; &lt;@U123&gt; &amp; co",
            "*bold* _it_ ~s~ `code` ```block``` https[:]//evil.example/pay www.evil.example",
            "“&lt;http[:]//x|click here&gt; *now*”",
            "Namespace: tenant&lt;a&gt;",
            "“the user said &lt;@U123&gt; asked for it”",
        ] {
            assert!(theirs.contains(hostile_part), "{hostile_part} in {theirs}");
        }
        assert!(
            !theirs.contains('<') && !theirs.contains('>') && !theirs.contains("://"),
            "{theirs}"
        );
    }

    #[test]
    fn slack_buttons_carry_the_key_and_the_arguments_digest_while_the_call_waits() {
        let pending = event("{}");
        let (_, _, elements) = slack_blocks(&pending, false);
        assert_eq!(
            elements.len(),
            1,
            "no decision buttons without Slack's interactivity"
        );
        assert_eq!(
            elements[0]["url"],
            format!("https://inbox.example.com/records/{}", "ab".repeat(32))
        );
        let (_, _, elements) = slack_blocks(&pending, true);
        let value = format!(
            "{}:{}",
            "ab".repeat(32),
            hex::encode(Sha256::digest(b"f00d"))
        );
        assert_eq!(elements[1]["action_id"], APPROVE);
        assert_eq!(elements[1]["value"], value);
        assert_eq!(elements[2]["action_id"], DENY);
        assert_eq!(elements[2]["value"], value);
        let mut decided = pending;
        decided.kind = Kind::Decided;
        decided.state = "approved";
        decided.fingerprint = None;
        let (_, _, elements) = slack_blocks(&decided, true);
        assert_eq!(elements.len(), 1, "nothing left to decide");
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
            serde_json::from_slice(&body(&added, Format::Slack, "https://i.example", true))
                .unwrap();
        let text = slack["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(text.starts_with("*Approval 1 of 2* by dana\n"), "{text}");
        assert!(
            text.contains("Approvals: 1 of 2 approvals (dana); erin or frank may still approve"),
            "{text}"
        );
        let plain: Value =
            serde_json::from_slice(&body(&added, Format::Json, "https://i.example", true)).unwrap();
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
        let body = body(
            &event("{}"),
            Format::Json,
            "https://inbox.example.com",
            false,
        );
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["call_id"], "call-7");
        assert_eq!(value["run_id"], Value::Null);
        assert_eq!(value["why"], "the user said <@U123> asked for it");
    }
}
