//! Every call gets an `execute_tool` span with the tool, its class, key,
//! attempts and what idem decided (`idem.outcome`); the executor counts executions, dedup hits,
//! retries, refusals and approvals.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use idem::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Collects the fields of every `execute_tool` span.
#[derive(Default, Clone)]
struct Spans {
    next: Arc<AtomicU64>,
    fields: Arc<Mutex<BTreeMap<u64, BTreeMap<String, String>>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        if span.metadata().name() == "execute_tool" {
            let mut fields = BTreeMap::new();
            span.record(&mut Fields(&mut fields));
            self.fields.lock().unwrap().insert(id, fields);
        }
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(fields) = self.fields.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn each_call_has_a_span_with_its_facts_and_the_counters_add_up() {
    let spans = Spans::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(app.clone())
        .build();
    let email = || SendEmail {
        to: "ada@example.com".into(),
        subject: "Hi".into(),
        body: "Hello".into(),
    };

    let key = tracing::subscriber::with_default(spans.clone(), || {
        rt.block_on(async {
            let first = send_twice(&exec, "call_1", email).await;
            look_up_ada(&exec).await;
            let other = SendEmail {
                to: "bob@example.com".into(),
                ..email()
            };
            exec.call(send_email, other)
                .call_id("call_1")
                .await
                .unwrap_err();
            delete_approved_by(&exec, "ops", "call_2").await;
            first.meta.key.unwrap()
        })
    });

    let spans: Vec<BTreeMap<String, String>> =
        spans.fields.lock().unwrap().values().cloned().collect();
    assert_eq!(spans.len(), 5);
    let field = |i: usize, name: &str| spans[i].get(name).cloned().unwrap_or_default();
    assert_eq!(field(0, "gen_ai.tool.name"), "send_email");
    assert_eq!(field(0, "otel.name"), "execute_tool send_email");
    assert_eq!(field(0, "gen_ai.tool.call.id"), "call_1");
    assert_eq!(field(0, "idem.class"), "idempotent_write");
    assert_eq!(field(0, "idem.key"), key.as_str());
    assert_eq!(field(0, "idem.attempts"), "1");
    assert_eq!(field(0, "idem.outcome"), "executed");
    assert_eq!(field(1, "idem.outcome"), "deduplicated");
    assert_eq!(field(1, "idem.attempts"), "0");
    assert_eq!(field(2, "idem.class"), "read");
    assert_eq!(field(2, "idem.key"), "", "reads have no key");
    assert_eq!(field(3, "idem.outcome"), "refused");
    assert_eq!(field(3, "idem.refusal"), "key_reused");
    assert_eq!(field(3, "error.type"), "key_reused");
    assert_eq!(field(4, "idem.class"), "irreversible");
    assert_eq!(field(4, "idem.approver"), "ops");

    let m = exec.metrics();
    assert_eq!(m.executions, 3, "send, lookup, delete");
    assert_eq!(m.dedup_hits, 1);
    assert_eq!(m.refusals, 1);
    assert_eq!(m.retries, 0);
    assert_eq!(m.approvals_requested, 1);
    assert_eq!(m.approvals_denied, 0);
}
