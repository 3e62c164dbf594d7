//! The main demo: one agent run meets every way a tool call gets repeated,
//! on the embedded SQLite store (`IDEM_STORE`, default `sqlite://idem.db`).
//!
//! Run it twice: the second run finds every write recorded in the file and
//! performs none of them again.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
mod common;

use std::sync::atomic::Ordering;

use common::{charge_card, delete_account, lookup_customer, send_email, App, Charge};
use idem::approval::{ApprovalDecision, Callback};
use idem::prelude::*;
use idem::provider::{Anthropic, OpenAi, Provider};
use serde_json::json;

fn step(title: &str) {
    println!("\n{title}");
}

fn say(what: impl std::fmt::Display) {
    println!("   {what}");
}

/// How a dispatched call was carried out, for the log.
fn how(r: &idem::ToolResult) -> String {
    match (r.meta(), &r.result) {
        (Some(m), _) if m.deduplicated => "answered from the record, not run".to_owned(),
        (Some(m), _) => format!(
            "ran ({} attempt{})",
            m.attempts,
            if m.attempts == 1 { "" } else { "s" }
        ),
        (None, Err(e)) => format!("refused: {}", e.code()),
        (None, Ok(_)) => unreachable!(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Built with `--features otel` and OTEL_EXPORTER_OTLP_ENDPOINT set:
    // every call's span and the executor's metrics go there over OTLP.
    #[cfg(feature = "otel")]
    let _telemetry = common::otel::init("idem-demo")?;
    // The run is one agent invocation: each tool call's span is its child.
    let run = tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent idem-demo",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "idem-demo",
    );
    tracing::Instrument::instrument(demo(), run).await
}

async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    // The error's message names the store with its password hidden (its
    // `Debug`, which `?` out of `main` would print, is not for people).
    let store = idem::store::from_env().await.map_err(|e| e.to_string())?;
    println!(
        "idem demo — store {} (set IDEM_STORE to change; delete the file to start over)",
        idem::store::url::redact(&store.describe())
    );

    let app = App::default();
    let executor = Executor::builder_shared(store)
        .state(app.clone())
        // Deleting an account waits for a person (`idem approve`).
        .approvals(Callback::new(|_req| async {
            Ok(ApprovalDecision::Pending {
                message: "deleting an account needs a person".into(),
            })
        }))
        .build();
    let registry = tools![lookup_customer, send_email, charge_card, delete_account];
    // What each tool is, for the approval inbox (`idem serve --tools
    // idem-tools.json`) to show the people who decide.
    std::fs::write("idem-tools.json", registry.catalog().to_json())?;
    let dispatcher = Dispatcher::new(executor.clone(), registry);
    let run = RunContext::new("demo-run-1", 1);

    step("1. OpenAI response: look Ada up and email her; the mail provider accepts the email but its response is lost");
    app.mail.lose_next_response.store(true, Ordering::SeqCst);
    let openai = json!({"role": "assistant", "tool_calls": [
        {"id": "call_demo_lookup", "type": "function",
         "function": {"name": "lookup_customer", "arguments": "{\"email\":\"ada@example.com\"}"}},
        {"id": "call_demo_email", "type": "function",
         "function": {"name": "send_email", "arguments": "{\"to\":\"ada@example.com\",\"subject\":\"Your invoice\"}"}}
    ]});
    let results = dispatcher.handle::<OpenAi>(&openai, &run).await?;
    for (r, m) in results.iter().zip(OpenAi::reply(&results)) {
        say(format!(
            "{:<16} {:<36} → {}",
            r.tool,
            how(r),
            m["content"].as_str().unwrap_or_default()
        ));
    }

    step("2. The model did not see the result and sends the same call again");
    let again = dispatcher.handle::<OpenAi>(&openai, &run).await?;
    say(format!("{:<16} {}", again[1].tool, how(&again[1])));

    step("3. Anthropic message: a reminder, a new call id — a new, legitimate email");
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Sending a reminder."},
        {"type": "tool_use", "id": "toolu_demo_reminder", "name": "send_email",
         "input": {"to": "ada@example.com", "subject": "Reminder: invoice due"}}
    ]});
    let results = dispatcher.handle::<Anthropic>(&anthropic, &run).await?;
    let reply = Anthropic::reply(&results);
    say(format!(
        "{:<16} {:<36} → {}",
        results[0].tool,
        how(&results[0]),
        reply["content"][0]["content"].as_str().unwrap_or_default()
    ));

    step("4. A card charge (non-idempotent) times out: it may or may not have happened");
    app.payments.hang_next.store(true, Ordering::SeqCst);
    let charge = Charge {
        customer: "ada".into(),
        cents: 4_900,
    };
    for who in ["the call", "the model's retry"] {
        match executor.call(charge_card, charge.clone()).call_id("call_demo_charge").await {
            Ok(c) => say(format!("{who}: {} (from the record: {})", c.output, c.meta.deduplicated)),
            Err(IdemError::OutcomeUnknown { .. }) => {
                say(format!("{who}: refused — outcome unknown; never retried, never re-run: `idem ls --state unknown` shows it to an operator"))
            }
            Err(e) => say(format!("{who}: {e}")),
        }
    }

    step("5. An irreversible call waits for a person; asking again does not ask twice");
    let delete = json!({"tool_calls": [{"id": "call_demo_delete", "type": "function",
        "function": {"name": "delete_account", "arguments": "{\"customer\":\"mallory\"}"}}]});
    for _ in 0..2 {
        let r = dispatcher.handle::<OpenAi>(&delete, &run).await?;
        match &r[0].result {
            Err(IdemError::ApprovalPending { key, .. }) => say(format!(
                "{:<16} awaits approval, nothing ran: `idem approve {} --by you`, then run the demo again",
                r[0].tool,
                &key.as_str()[..12]
            )),
            _ => say(format!(
                "{:<16} {:<36} → {}",
                r[0].tool,
                how(&r[0]),
                OpenAi::reply(&r)[0]["content"]
                    .as_str()
                    .unwrap_or_default()
            )),
        }
    }

    step("6. Replay the run from its transcript: reads run, writes come from records, nothing is sent");
    let replay = Dispatcher::new(
        executor.replaying(),
        tools![lookup_customer, send_email, charge_card, delete_account],
    );
    for r in replay.handle::<OpenAi>(&openai, &run).await? {
        say(format!("{:<16} {}", r.tool, how(&r)));
    }

    let m = executor.metrics();
    println!(
        "\nThis process delivered {} email(s) and attempted {} charge(s). Executions {}, answered from records {}, retries {}, refusals {}.\nRun it again: every write is found in the store and nothing is sent twice.",
        app.mail.sent.lock().unwrap().len(),
        app.payments.charges.load(Ordering::SeqCst),
        m.executions,
        m.dedup_hits,
        m.retries,
        m.refusals,
    );
    println!("What idem refused is for a person to settle: `idem ls --state unknown,awaiting_approval`, or on a web page: `idem serve` (crate idem-cli).");
    Ok(())
}
