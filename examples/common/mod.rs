//! The demo's application and tools, shared by `examples/demo.rs` and
//! `examples/mcp_server.rs`.
//!
//! The tools are written `#[idem::tool]`: the MCP example has rmcp's own
//! `#[tool]` in scope, and the path says which attribute is meant.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
}

#[derive(Clone, Default)]
pub struct App {
    pub mail: Arc<MailProvider>,
    pub payments: Arc<Payments>,
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
pub struct Charge {
    pub customer: String,
    pub cents: u64,
}

/// Charge a customer's card.
#[idem::tool(class = "non_idempotent_write", timeout = "1s")]
pub async fn charge_card(
    args: Charge,
    State(payments): State<Arc<Payments>>,
) -> Result<String, ToolError> {
    payments.charges.fetch_add(1, Ordering::SeqCst);
    if payments.hang_next.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
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
pub async fn delete_account(args: DeleteAccount) -> Result<String, ToolError> {
    Ok(format!("deleted {}", args.customer))
}
