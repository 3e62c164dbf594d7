//! What the approval rules cost per call: an `irreversible` call's first
//! run on the in-memory store, its approval decided by a rule of a
//! finance team's five (three CEL conditions evaluated, the fourth rule
//! decides `run`), against the same call approved by an allow-list policy
//! with no rules in force; and the rules' evaluation alone.
//!
//! Run with `cargo bench -p idem --bench rules`; compare the medians of
//! `call/no_rules` and `call/rules_run` (one run, one machine).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use idem::approval::rules::{Call, RuleEntry, Rules};
use idem::approval::AllowList;
use idem::dispatch::{Arguments, ToolCall};
use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Refund {
    cents: u64,
    account: String,
}

/// Refund a charge.
#[idem::tool(class = "irreversible")]
async fn refund(args: Refund) -> Result<u64, ToolError> {
    Ok(args.cents)
}

/// Five rules; a small refund by alice is decided by the fourth.
fn finance() -> Rules {
    let table = |v: serde_json::Value| serde_json::from_value::<RuleEntry>(v).unwrap();
    Rules::check(
        vec![
            table(
                json!({"name": "no CI refunds", "tools": ["refund"], "principals": ["ci-*"],
                         "decision": "deny", "reason": "CI never refunds"}),
            ),
            table(json!({"name": "trial weekends", "tools": ["refund"],
                         "when": "args.account.startsWith(\"trial-\") && time.weekday >= 6",
                         "decision": "deny", "reason": "not at weekends"})),
            table(
                json!({"name": "ceiling", "tools": ["refund"], "shadow": true,
                         "when": "args.cents > 100000", "decision": "deny", "reason": "over"}),
            ),
            table(
                json!({"name": "small refunds", "tools": ["refund"], "when": "args.cents < 5000",
                         "decision": "run"}),
            ),
            table(
                json!({"name": "large refunds", "tools": ["refund"], "required": 2,
                         "forbid_self_approval": true}),
            ),
        ],
        &["dana".into(), "erin".into(), "frank".into()],
    )
    .unwrap()
}

fn dispatcher(rules: Option<&Rules>, rt: &tokio::runtime::Runtime) -> Dispatcher<()> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    if let Some(rules) = rules {
        rt.block_on(rules.publish(store.as_ref())).unwrap();
    }
    let exec = Executor::builder_shared(store)
        .approvals(AllowList::new(["refund"]))
        .build();
    Dispatcher::new(exec, idem::tools![refund])
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let run = RunContext::default()
        .namespace(Namespace::new("pay/alice").unwrap())
        .principal("alice");
    let counter = Arc::new(AtomicU64::new(0));
    let mut group = c.benchmark_group("call");
    group.measurement_time(Duration::from_secs(4));
    for (name, rules) in [("no_rules", None), ("rules_run", Some(finance()))] {
        let agent = dispatcher(rules.as_ref(), &rt);
        let (run, counter) = (run.clone(), counter.clone());
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let call = ToolCall {
                    id: Some(format!("call-{}", counter.fetch_add(1, Ordering::Relaxed))),
                    name: "refund".into(),
                    arguments: Arguments::Json(json!({"cents": 1999, "account": "acme"})),
                };
                let (agent, run) = (&agent, &run);
                async move {
                    let done = agent.dispatch_one(call, run).await;
                    assert!(done.result.is_ok(), "{:?}", done.result);
                }
            })
        });
    }
    group.finish();

    let rules = finance();
    let args = json!({"cents": 1999, "account": "acme"});
    c.bench_function("rules/decide", |b| {
        b.iter(|| {
            let verdict = rules.decide(&Call {
                tool: "refund",
                namespace: Some("pay/alice"),
                principal: Some("alice"),
                args: Some(&args),
                now: idem::clock::Timestamp(1_796_644_800_000),
            });
            assert!(verdict.decided.is_some());
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
