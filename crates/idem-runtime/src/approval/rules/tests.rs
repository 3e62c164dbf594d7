use super::*;
use crate::approval::rules::decide::{Decided, Verdict};
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{CallInfo, Fence, RecordState};

fn entry(toml_text: &str) -> Vec<RuleEntry> {
    #[derive(Deserialize)]
    struct F {
        rule: Vec<RuleEntry>,
    }
    serde_json::from_value::<F>(toml_like(toml_text))
        .unwrap()
        .rule
}

/// The tables these tests write, as JSON (the runtime reads no TOML).
fn toml_like(text: &str) -> serde_json::Value {
    let mut rules = Vec::new();
    for table in text.split("[[rule]]").skip(1) {
        let mut map = serde_json::Map::new();
        for line in table.lines().filter(|l| !l.trim().is_empty()) {
            let (k, v) = line.split_once(" = ").unwrap();
            map.insert(k.trim().into(), serde_json::from_str(v.trim()).unwrap());
        }
        rules.push(serde_json::Value::Object(map));
    }
    serde_json::json!({ "rule": rules })
}

fn pending(tool: &str, namespace: &str, asker: Option<&str>) -> Record {
    let mut steps = std::collections::BTreeMap::new();
    if let Some(asker) = asker {
        steps.insert(ASKER_STEP.to_owned(), serde_json::json!(asker));
    }
    Record {
        key: IdempotencyKey::parse(&"a".repeat(64)).unwrap(),
        tool: tool.into(),
        fingerprint: Fingerprint::new("cd".repeat(32)),
        created_at: Timestamp(5),
        state: RecordState::AwaitingApproval {
            fence: Fence(1),
            requested_at: Timestamp(5),
            expires_at: Timestamp(99),
            message: "asked".into(),
        },
        steps,
        info: CallInfo {
            namespace: Some(namespace.into()),
            ..CallInfo::default()
        },
        worker: None,
        audit: Vec::new(),
    }
}

#[test]
fn rules_that_could_never_work_are_refused() {
    let approvers = ["dana".to_owned(), "erin".to_owned()];
    let refused = |text: &str| Rules::check(entry(text), &approvers).unwrap_err().problem;
    assert!(refused("[[rule]]\nrequired = 3\n").contains("only 2 may approve"));
    assert!(refused("[[rule]]\nrequired = 0\n").contains("at least 1"));
    assert!(refused("[[rule]]\napprovers = [\"vic\"]\n").contains("\"vic\" is not an"));
    assert!(refused("[[rule]]\napprovers = []\n").contains("lets nobody decide"));
    assert!(
        refused("[[rule]]\nrequired = 1\n[[rule]]\ntools = [\"x\"]\n").contains("move it last")
    );
    let ok = Rules::check(
        entry("[[rule]]\ntools = [\"charge_*\"]\nrequired = 2\n[[rule]]\nrequired = 1\n"),
        &approvers,
    )
    .unwrap();
    assert_eq!(ok.rules[0].name, "rule 1");
    let call = |tool, namespace| Call {
        tool,
        namespace,
        principal: None,
        args: None,
        now: MONDAY,
    };
    assert!(ok.rules[0].matches(&call("charge_card", None)).unwrap());
    assert!(!ok.rules[0].matches(&call("refund", None)).unwrap());
    assert!(ok.rules[1].matches(&call("refund", Some("x"))).unwrap());
}

#[test]
fn the_asker_is_the_recorded_principal_never_a_part_of_the_namespace() {
    let approvers = [
        "erin".to_owned(),
        "mallory/erin".to_owned(),
        "dana".to_owned(),
    ];
    let rules = Rules::check(
        entry("[[rule]]\nrequired = 1\nforbid_self_approval = true\n"),
        &approvers,
    )
    .unwrap();
    // OAuth subject `mallory/erin`: one principal, in namespace
    // mcp/pay/mallory/erin. erin did not ask; mallory/erin did.
    let record = pending("refund", "mcp/pay/mallory/erin", Some("mallory/erin"));
    assert_eq!(record.asker().as_deref(), Some("mallory/erin"));
    assert!(rules.allows(&record, "erin", Act::Approve).is_ok());
    let own = rules
        .allows(&record, "mallory/erin", Act::Approve)
        .unwrap_err();
    assert!(matches!(own, RuleRefusal::OwnCall { .. }), "{own}");
    assert!(
        rules.allows(&record, "mallory/erin", Act::Deny).is_ok(),
        "may still deny"
    );
    // Nobody outside the approvers decides while rules are in force.
    let stranger = rules.allows(&record, "bob", Act::Deny).unwrap_err();
    assert!(
        matches!(stranger, RuleRefusal::NotAnApprover { .. }),
        "{stranger}"
    );
}

/// A finance team's rules: small refunds run, large ones take one or
/// two people, a trial account never refunds on a weekend, and a shadow
/// rule is being rolled out.
fn finance() -> Rules {
    let table = |v: serde_json::Value| serde_json::from_value::<RuleEntry>(v).unwrap();
    let rules = vec![
        table(serde_json::json!({
            "name": "trial weekend", "tools": ["refund"], "decision": "deny",
            "when": "args.account == \"trial\" && time.weekday >= 6",
            "reason": "Trial accounts get no refunds at weekends; ask on Monday.",
        })),
        table(serde_json::json!({
            "name": "new ceiling", "shadow": true, "tools": ["refund"],
            "when": "args.cents > 100000", "decision": "deny", "reason": "over the new ceiling",
        })),
        table(serde_json::json!({
            "name": "small refunds", "tools": ["refund"], "when": "args.cents < 5000",
            "decision": "run",
        })),
        table(serde_json::json!({
            "name": "refunds", "tools": ["refund"], "when": "args.cents <= 500000",
            "approvers": ["dana", "erin"],
        })),
        table(serde_json::json!({
            "name": "large refunds", "tools": ["refund"], "required": 2,
            "approvers": ["dana", "erin", "frank"], "forbid_self_approval": true,
        })),
    ];
    let approvers = ["dana", "erin", "frank"].map(String::from);
    Rules::check(rules, &approvers).unwrap()
}

/// 2026-12-07 is a Monday; 2026-12-12 a Saturday (12:00 UTC).
const MONDAY: Timestamp = Timestamp(1_796_644_800_000);
const SATURDAY: Timestamp = Timestamp(1_797_076_800_000);

fn refund(args: &serde_json::Value, now: Timestamp) -> Verdict {
    finance().decide(&Call {
        tool: "refund",
        namespace: Some("mcp/pay/alice"),
        principal: Some("alice"),
        args: Some(args),
        now,
    })
}

fn decided(verdict: &Verdict) -> (&str, &Decided) {
    let (rule, decided) = verdict.decided.as_ref().expect("a rule decides");
    (rule.as_str(), decided)
}

#[test]
fn the_first_rule_that_matches_decides_each_call() {
    let small = refund(
        &serde_json::json!({"cents": 1999, "account": "acme"}),
        MONDAY,
    );
    assert_eq!(decided(&small), ("small refunds", &Decided::Run));
    let mid = refund(
        &serde_json::json!({"cents": 20000, "account": "acme"}),
        MONDAY,
    );
    assert_eq!(
        decided(&mid),
        (
            "refunds",
            &Decided::Ask {
                required: 1,
                approvers: "dana or erin".into()
            }
        )
    );
    let large = refund(
        &serde_json::json!({"cents": 900000, "account": "acme"}),
        MONDAY,
    );
    assert_eq!(decided(&large).0, "large refunds");
    assert_eq!(
        large.shadows,
        [(
            "new ceiling".to_owned(),
            Decided::Deny {
                reason: "over the new ceiling".into()
            }
        )],
        "the shadow rule says what it would have done, and decides nothing"
    );
    let weekend = refund(
        &serde_json::json!({"cents": 100, "account": "trial"}),
        SATURDAY,
    );
    assert!(
        matches!(decided(&weekend), ("trial weekend", Decided::Deny { reason }) if reason.contains("ask on Monday"))
    );
    let weekday = refund(
        &serde_json::json!({"cents": 100, "account": "trial"}),
        MONDAY,
    );
    assert_eq!(decided(&weekday), ("small refunds", &Decided::Run));
    // No rule for another tool: the executor's policy decides.
    let other = finance().decide(&Call {
        tool: "send_email",
        namespace: None,
        principal: None,
        args: Some(&serde_json::json!({})),
        now: MONDAY,
    });
    assert_eq!(other, Verdict::default());
}

#[test]
fn a_condition_that_fails_on_a_call_never_lapses_into_running() {
    // No `cents`: "small refunds" (run) does not match; "refunds" (ask)
    // does, read strictly.
    let missing = refund(&serde_json::json!({"account": "acme"}), MONDAY);
    assert_eq!(decided(&missing).0, "refunds");
    let text = refund(
        &serde_json::json!({"cents": "1", "account": "acme"}),
        MONDAY,
    );
    assert_ne!(
        decided(&text).1,
        &Decided::Run,
        "a string is not a small number"
    );
}

#[test]
fn a_hostile_argument_is_data_and_cannot_change_how_a_condition_reads() {
    let rule = r#"
[[rule]]
name = "trial"
when = "args.account == \"trial\""
decision = "run"
[[rule]]
name = "others"
"#;
    let rules = Rules::check(entry(rule), &["dana".to_owned()]).unwrap();
    let run = |account: &str| {
        let args = serde_json::json!({ "account": account });
        let verdict = rules.decide(&Call {
            tool: "refund",
            namespace: None,
            principal: None,
            args: Some(&args),
            now: MONDAY,
        });
        decided(&verdict).0.to_owned()
    };
    assert_eq!(run("trial"), "trial");
    for hostile in [
        r#"trial" || true || ""#,
        "x\" || args.account != \"",
        "trial\n",
        "trial\u{200b}", // a zero-width space
        "tria\u{217c}",  // ROMAN NUMERAL FIFTY, which looks like l
        "tr\u{0456}al",  // CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I
        "trial\u{202e}", // a right-to-left override
        "\") || true; //",
    ] {
        assert_eq!(run(hostile), "others", "{hostile:?} is only a string");
    }
}

#[test]
fn rules_a_file_cannot_mean_are_refused_with_the_reason() {
    let approvers = ["dana".to_owned()];
    let refused = |text: &str| Rules::check(entry(text), &approvers).unwrap_err();
    let e = refused("[[rule]]\ntools = [\"x\"]\n[[rule]]\nwhen = \"args.cents >\"\n");
    assert_eq!(e.index, 1);
    assert!(e.problem.contains("its condition does not parse"), "{e}");
    let e = refused("[[rule]]\nwhen = \"cents > 5\"\n");
    assert!(
        e.problem
            .contains("names `cents`, which a call does not have"),
        "{e}"
    );
    assert!(refused("[[rule]]\ndecision = \"deny\"\n")
        .problem
        .contains("needs a reason"));
    assert!(
        refused("[[rule]]\ndecision = \"run\"\napprovers = [\"dana\"]\n")
            .problem
            .contains("asks nobody")
    );
    assert!(refused("[[rule]]\nreason = \"x\"\n")
        .problem
        .contains("only decision = \"deny\""));
    // A comprehension's own variable is not a call's.
    assert!(Rules::check(
        entry("[[rule]]\nwhen = \"args.items.all(i, i.cents < 100)\"\n"),
        &approvers
    )
    .is_ok());
    // A catch-all shadow rule hides nothing.
    assert!(Rules::check(
        entry("[[rule]]\nshadow = true\ndecision = \"run\"\n[[rule]]\ntools = [\"x\"]\n"),
        &approvers
    )
    .is_ok());
}
