//! The main demo: one agent run meets every way a tool call gets repeated,
//! on the embedded SQLite store (`IDEM_STORE`, default `sqlite://idem.db`).
//!
//! Run it twice: the second run finds every write recorded in the file and
//! performs none of them again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem::approval::AllowList;
use idem::dispatch::{anthropic_reply, openai_messages, Dispatcher, RunContext};
use idem::prelude::*;
use idem::{tools, Executor, IdemError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A mail provider that deduplicates on `Idempotency-Key`, as real ones do.
#[derive(Default)]
struct MailProvider {
    sent: Mutex<Vec<String>>,
    keys: Mutex<Vec<String>>,
    lose_next_response: AtomicBool,
}

/// A payment provider without idempotency keys.
#[derive(Default)]
struct Payments {
    charges: AtomicUsize,
    hang_next: AtomicBool,
}

#[derive(Clone, Default)]
struct App {
    mail: Arc<MailProvider>,
    payments: Arc<Payments>,
}

impl FromRef<App> for Arc<MailProvider> {
    fn from_ref(app: &App) -> Self {
        app.mail.clone()
    }
}

impl FromRef<App> for Arc<Payments> {
    fn from_ref(app: &App) -> Self {
        app.payments.clone()
    }
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct SendEmail {
    /// Recipient address.
    to: String,
    subject: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct EmailSent {
    message_id: String,
}

/// Send an email to a customer.
#[tool(class = "idempotent_write", timeout = "1s")]
async fn send_email(
    args: SendEmail,
    ctx: &ToolCtx,
    State(mail): State<Arc<MailProvider>>,
) -> Result<EmailSent, ToolError> {
    let key = ctx.key().expect("writes are keyed").to_string();
    let message_id = format!("<{}@demo.idem>", &key[..16]);
    let first_time = {
        let mut keys = mail.keys.lock().unwrap();
        let new = !keys.contains(&key);
        if new {
            keys.push(key);
        }
        new
    };
    if first_time {
        mail.sent.lock().unwrap().push(args.to.clone());
    }
    if mail.lose_next_response.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    Ok(EmailSent { message_id })
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Charge {
    customer: String,
    cents: u64,
}

/// Charge a customer's card.
#[tool(class = "non_idempotent_write", timeout = "1s")]
async fn charge_card(args: Charge, State(payments): State<Arc<Payments>>) -> Result<String, ToolError> {
    payments.charges.fetch_add(1, Ordering::SeqCst);
    if payments.hang_next.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    Ok(format!("charged {} cents to {}", args.cents, args.customer))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Lookup {
    email: String,
}

/// Look a customer up by email address.
#[tool(class = "read")]
async fn lookup_customer(args: Lookup) -> Result<serde_json::Value, ToolError> {
    Ok(json!({ "email": args.email, "plan": "pro" }))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct DeleteAccount {
    customer: String,
}

/// Delete a customer's account and every record of it.
#[tool(class = "irreversible")]
async fn delete_account(args: DeleteAccount) -> Result<String, ToolError> {
    Ok(format!("deleted {}", args.customer))
}

fn say(step: &str, what: impl std::fmt::Display) {
    println!("{step:>4}  {what}");
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var(idem::store::STORE_ENV).unwrap_or_else(|_| idem::store::DEFAULT_STORE_URL.to_owned());
    let store = idem::store::from_env().await?;
    println!("idem demo — store {url} (set IDEM_STORE to change; delete the file to start over)\n");

    let app = App::default();
    let executor = Executor::builder_shared(store)
        .state(app.clone())
        .approvals(AllowList::new(["delete_account"]))
        .build();
    let registry = tools![lookup_customer, send_email, charge_card, delete_account];
    let dispatcher = Dispatcher::new(executor.clone(), registry);
    let run = RunContext::new("demo-run-1", 1);

    // 1. OpenAI: the provider accepts the email but the response is lost.
    app.mail.lose_next_response.store(true, Ordering::SeqCst);
    let openai = json!({"role": "assistant", "tool_calls": [
        {"id": "call_demo_lookup", "type": "function",
         "function": {"name": "lookup_customer", "arguments": "{\"email\":\"ada@example.com\"}"}},
        {"id": "call_demo_email", "type": "function",
         "function": {"name": "send_email", "arguments": "{\"to\":\"ada@example.com\",\"subject\":\"Your invoice\"}"}}
    ]});
    let results = dispatcher.openai(&openai, &run).await?;
    for (r, m) in results.iter().zip(openai_messages(&results)) {
        let how = match r.meta() {
            Some(meta) if meta.deduplicated => "answered from the record".to_owned(),
            Some(meta) => format!("ran, {} attempt(s)", meta.attempts),
            None => "error".to_owned(),
        };
        say("1", format!("{} → {} ({how})", r.tool, m["content"]));
    }

    // 2. The model, unsure, sends the same call again.
    let again = dispatcher.openai(&openai, &run).await?;
    say("2", format!("same call id again → deduplicated: {}", again[1].deduplicated()));

    // 3. Anthropic: the same intent, another call id: a new, legitimate email.
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Sending a reminder."},
        {"type": "tool_use", "id": "toolu_demo_reminder", "name": "send_email",
         "input": {"to": "ada@example.com", "subject": "Reminder: invoice due"}}
    ]});
    let results = dispatcher.anthropic(&anthropic, &run).await?;
    say("3", format!("reminder (new call id) → {}", anthropic_reply(&results)["content"][0]["content"]));

    // 4. A charge times out: it may have happened. Never retried, never re-run.
    app.payments.hang_next.store(true, Ordering::SeqCst);
    let charge = Charge { customer: "ada".into(), cents: 4_900 };
    for attempt in ["first call", "model retries"] {
        match executor.call(charge_card, charge.clone()).call_id("call_demo_charge").await {
            Ok(c) => say("4", format!("{attempt}: {} (deduplicated: {})", c.output, c.meta.deduplicated)),
            Err(e @ IdemError::OutcomeUnknown { .. }) => say("4", format!("{attempt}: refused — {e}")),
            Err(e) => say("4", format!("{attempt}: {e}")),
        }
    }

    // 5. An irreversible call goes through the approval policy, once.
    let delete = json!({"tool_calls": [{"id": "call_demo_delete", "type": "function",
        "function": {"name": "delete_account", "arguments": "{\"customer\":\"mallory\"}"}}]});
    for _ in 0..2 {
        let r = dispatcher.openai(&delete, &run).await?;
        say("5", format!("delete_account → {} (deduplicated: {})", openai_messages(&r)[0]["content"], r[0].deduplicated()));
    }

    // 6. Replay the whole run with no side effects at all.
    let replay = Dispatcher::new(executor.replaying(), tools![lookup_customer, send_email, charge_card, delete_account]);
    let replayed = replay.openai(&openai, &run).await?;
    say("6", format!("replay: {} calls answered, {} from records", replayed.len(), replayed.iter().filter(|r| r.deduplicated()).count()));

    let m = executor.metrics();
    println!(
        "\nemails delivered by this process: {} | charges attempted: {} | executions {}, dedup hits {}, retries {}, refusals {}",
        app.mail.sent.lock().unwrap().len(),
        app.payments.charges.load(Ordering::SeqCst),
        m.executions,
        m.dedup_hits,
        m.retries,
        m.refusals,
    );
    Ok(())
}
