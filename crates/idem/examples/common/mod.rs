//! The demo's application and tools, shared by `examples/demo.rs` and
//! `examples/mcp_server.rs`.
//!
//! The tools are written `#[idem::tool]`: the MCP example has rmcp's own
//! `#[tool]` in scope, and the path says which attribute is meant.

#[cfg(feature = "otel")]
pub mod otel;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem::{FromRef, State, ToolCtx, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A mail provider that deduplicates on `Idempotency-Key`, as real ones do.
#[derive(Default)]
pub struct MailProvider {
    pub sent: Mutex<Vec<String>>,
    keys: Mutex<Vec<String>>,
    /// The demo's fault switch: the next email is delivered but its
    /// response never comes back.
    pub lose_next_response: AtomicBool,
}

/// A payment provider without idempotency keys.
#[derive(Default)]
pub struct Payments {
    pub charges: AtomicUsize,
    /// The demo's fault switch: the next charge hangs after it is made.
    pub hang_next: AtomicBool,
    /// A slow provider: every charge answers this many milliseconds after
    /// it is made.
    pub answer_after_ms: AtomicU64,
}

/// What the providers did, one JSON line per effect, in the file that
/// `IDEM_DEMO_LEDGER` names (none when it is unset): how the MCP tests
/// count effects from outside the server, across its restarts.
#[derive(Default)]
pub struct Ledger {
    file: Option<Mutex<std::fs::File>>,
}

impl Ledger {
    /// Appending to `IDEM_DEMO_LEDGER`, if set.
    pub fn from_env() -> std::io::Result<Ledger> {
        let Some(path) = std::env::var_os("IDEM_DEMO_LEDGER") else {
            return Ok(Ledger::default());
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Ledger {
            file: Some(Mutex::new(file)),
        })
    }

    /// A provider did `effect`.
    pub fn record(&self, effect: &str, detail: &str) {
        if let Some(file) = &self.file {
            let line = json!({ "effect": effect, "detail": detail }).to_string();
            let mut file = file.lock().unwrap();
            let _ = writeln!(file, "{line}").and_then(|()| file.flush());
        }
    }
}

#[derive(Clone, Default)]
pub struct App {
    pub mail: Arc<MailProvider>,
    pub payments: Arc<Payments>,
    pub ledger: Arc<Ledger>,
}

impl FromRef<App> for Arc<Ledger> {
    fn from_ref(app: &App) -> Self {
        app.ledger.clone()
    }
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
pub struct SendEmail {
    /// Recipient address.
    pub to: String,
    pub subject: String,
}

/// What `send_email` returns. It derives `JsonSchema`, so over MCP the tool
/// declares an output schema and answers with structured content.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct EmailSent {
    pub message_id: String,
}

/// Send an email to a customer.
#[idem::tool(class = "idempotent_write", timeout = "1s")]
pub async fn send_email(
    args: SendEmail,
    ctx: &ToolCtx,
    State(mail): State<Arc<MailProvider>>,
    State(ledger): State<Arc<Ledger>>,
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
        ledger.record("email", &args.to);
    }
    if mail.lose_next_response.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    Ok(EmailSent { message_id })
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Charge {
    pub customer: String,
    pub cents: u64,
}

/// Charge a customer's card.
#[idem::tool(class = "non_idempotent_write", timeout = "1s")]
pub async fn charge_card(
    args: Charge,
    State(payments): State<Arc<Payments>>,
    State(ledger): State<Arc<Ledger>>,
) -> Result<String, ToolError> {
    payments.charges.fetch_add(1, Ordering::SeqCst);
    ledger.record(
        "charge",
        &format!("{} cents to {}", args.cents, args.customer),
    );
    if payments.hang_next.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    let slow = payments.answer_after_ms.load(Ordering::SeqCst);
    if slow > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(slow)).await;
    }
    Ok(format!("charged {} cents to {}", args.cents, args.customer))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Lookup {
    pub email: String,
}

/// Look a customer up by email address.
#[idem::tool(class = "read")]
pub async fn lookup_customer(args: Lookup) -> Result<serde_json::Value, ToolError> {
    Ok(json!({ "email": args.email, "plan": "pro" }))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeleteAccount {
    pub customer: String,
}

/// Delete a customer's account and every record of it.
#[idem::tool(class = "irreversible")]
pub async fn delete_account(
    args: DeleteAccount,
    State(ledger): State<Arc<Ledger>>,
) -> Result<String, ToolError> {
    ledger.record("delete", &args.customer);
    Ok(format!("deleted {}", args.customer))
}
