//! The inbox's views of records: version tokens, withheld and cut
//! arguments, escaped JSON.

use super::*;

#[test]
fn a_version_token_reads_back_and_refuses_what_it_did_not_write() {
    let seen = Seen {
        fence: 42,
        status: Status::AwaitingApproval,
        audit: 3,
    };
    assert_eq!(seen.token(), "42-awaiting_approval-3");
    assert_eq!(Seen::parse(&seen.token()), Some(seen));
    for bad in [
        "",
        "42",
        "42-awaiting_approval",
        "x-unknown-0",
        "1-sleeping-0",
    ] {
        assert_eq!(Seen::parse(bad), None, "{bad}");
    }
}

fn awaiting(args: Option<&str>) -> Record {
    use idem_runtime::key::{Fingerprint, IdempotencyKey};
    use idem_runtime::record::Fence;
    Record {
        key: IdempotencyKey::parse(&"ab".repeat(32)).unwrap(),
        tool: "refund".into(),
        fingerprint: Fingerprint::new("cd".repeat(32)),
        created_at: Timestamp(1_000),
        state: RecordState::AwaitingApproval {
            fence: Fence(7),
            requested_at: Timestamp(1_000),
            expires_at: Timestamp(90_000_000),
            message: "refunds need finance".into(),
        },
        steps: Default::default(),
        info: {
            let mut info = CallInfo::default();
            info.args = args.map(str::to_owned);
            info
        },
        worker: None,
        audit: Vec::new(),
    }
}

#[test]
fn arguments_kept_out_of_the_store_are_shown_withheld_by_fingerprint() {
    let record = awaiting(None);
    let now = Timestamp(61_000);
    let detail = Detail::of(&record, None, now, None);
    assert_eq!(detail.arguments, None);
    assert_eq!(
        detail.class,
        Some("irreversible"),
        "only irreversible calls await approval"
    );
    assert!(arguments_in_words(&record).contains("fingerprint is cdcdcdcdcdcd"));
    let item = Item::of(&record, None, now, Duration::from_secs(30)).unwrap();
    assert_eq!(item.summary, "(withheld)");
    assert_eq!(item.age, "1m");
    assert!(item.overdue);
    let shown = awaiting(Some(r#"{"cents":4900,"charge":"ch_42"}"#));
    assert_eq!(
        arguments_in_words(&shown),
        r#"{"cents":4900,"charge":"ch_42"}"#
    );
    // Keys that try to read as more arguments stay inside their quotes.
    let forged = awaiting(Some(
        r#"{"cents":4900,"charge\" = \"ch_42\", cents = 990000":""}"#,
    ));
    assert_eq!(
        arguments_in_words(&forged),
        r#"{"cents":4900,"charge\" = \"ch_42\", cents = 990000":""}"#
    );
}

#[test]
fn a_row_says_when_it_cut_the_arguments() {
    assert_eq!(summary(r#"{"a":1}"#), r#"{"a":1}"#);
    let long = format!(
        r#"{{"cents":4900,"note":"{}","cents_really":990000}}"#,
        "x".repeat(100)
    );
    let row = summary(&long);
    assert!(
        row.ends_with("… (cut: open the record for all of it)"),
        "{row}"
    );
    assert!(!row.contains("990000"), "{row}");
}

#[test]
fn pretty_json_escapes_each_line_and_keeps_the_layout() {
    let text = pretty_json("{\"a\":\"x\u{202e}y\",\"b\":[1,2]}");
    assert!(!text.contains('\u{202e}'));
    assert!(text.contains("\\u{202e}"), "{text}");
    assert_eq!(text.lines().count(), 7, "{text}");
}
