//! A small fake world for scenario tests: a mail provider that honours
//! `Idempotency-Key` like real ones do, a ticket system that does not, a
//! credit ledger, and the tools an agent would call on them.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A mail provider. Like most providers it deduplicates requests carrying
/// the same `Idempotency-Key`.
#[derive(Default)]
pub struct MailProvider {
    /// Emails actually delivered: (message id, recipient, subject).
    delivered: Mutex<Vec<(String, String, String)>>,
    by_key: Mutex<HashMap<String, String>>,
    /// Requests received, deliveries or not.
    pub requests: AtomicUsize,
    /// Accept the next request, then never answer it (the client times out).
    pub lose_next_response: AtomicBool,
}

impl MailProvider {
    pub fn delivered(&self) -> Vec<(String, String, String)> {
        self.delivered.lock().unwrap().clone()
    }

    /// `POST /send` with an `Idempotency-Key` header.
    pub async fn send(&self, idempotency_key: &str, to: &str, subject: &str) -> String {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let id = {
            let mut by_key = self.by_key.lock().unwrap();
            match by_key.get(idempotency_key) {
                Some(id) => id.clone(),
                None => {
                    let mut delivered = self.delivered.lock().unwrap();
                    let id = format!("msg_{}", delivered.len() + 1);
                    delivered.push((id.clone(), to.to_owned(), subject.to_owned()));
                    by_key.insert(idempotency_key.to_owned(), id.clone());
                    id
                }
            }
        };
        if self.lose_next_response.swap(false, Ordering::SeqCst) {
            // Accepted and sent, but the response never arrives.
            std::future::pending::<()>().await;
        }
        id
    }
}

/// A ticket system with no idempotency support: every request is a ticket.
#[derive(Default)]
pub struct Tickets {
    pub created: Mutex<Vec<String>>,
}

/// A credit ledger: `add` applies a delta (not idempotent), `grant` is keyed
/// (the ledger ignores a key it has seen).
#[derive(Default)]
pub struct Ledger {
    pub balance: Mutex<i64>,
    seen: Mutex<Vec<String>>,
    /// The next requests are applied but their responses time out.
    pub lose_responses: AtomicUsize,
}

impl Ledger {
    pub fn balance(&self) -> i64 {
        *self.balance.lock().unwrap()
    }

    async fn answer(&self) {
        if self
            .lose_responses
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            std::future::pending::<()>().await;
        }
    }

    /// `POST /credits/add {amount}`: a delta.
    pub async fn add(&self, amount: i64) -> i64 {
        let balance = {
            let mut b = self.balance.lock().unwrap();
            *b += amount;
            *b
        };
        self.answer().await;
        balance
    }

    /// `POST /credits/grant {amount}` with a grant id: applied once per id.
    pub async fn grant(&self, grant_id: &str, amount: i64) -> i64 {
        let balance = {
            let mut seen = self.seen.lock().unwrap();
            let mut b = self.balance.lock().unwrap();
            if !seen.iter().any(|s| s == grant_id) {
                seen.push(grant_id.to_owned());
                *b += amount;
            }
            *b
        };
        self.answer().await;
        balance
    }
}

/// The application state the tools reach through `State<…>`.
#[derive(Clone, Default)]
pub struct App {
    pub mail: Arc<MailProvider>,
    pub tickets: Arc<Tickets>,
    pub ledger: Arc<Ledger>,
}

impl FromRef<App> for Arc<MailProvider> {
    fn from_ref(app: &App) -> Self {
        app.mail.clone()
    }
}
impl FromRef<App> for Arc<Tickets> {
    fn from_ref(app: &App) -> Self {
        app.tickets.clone()
    }
}
impl FromRef<App> for Arc<Ledger> {
    fn from_ref(app: &App) -> Self {
        app.ledger.clone()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Lookup {
    /// The customer's email address.
    pub email: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Customer {
    pub email: String,
    pub plan: String,
}

/// Look a customer up by email address.
#[tool(class = "read")]
pub async fn lookup_customer(args: Lookup) -> Result<Customer, ToolError> {
    Ok(Customer {
        email: args.email,
        plan: "pro".into(),
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendEmail {
    /// Recipient address.
    pub to: String,
    pub subject: String,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmailSent {
    pub message_id: String,
}

/// `send_email` of `email()` as call `call_id`, then the model's repeat of
/// it: the first call's output.
pub async fn send_twice(
    exec: &Executor<App>,
    call_id: &str,
    email: impl Fn() -> SendEmail,
) -> idem::CallOutput<EmailSent> {
    let first = exec
        .call(send_email, email())
        .call_id(call_id)
        .await
        .unwrap();
    exec.call(send_email, email())
        .call_id(call_id)
        .await
        .unwrap();
    first
}

/// Send an email to a customer.
#[tool(class = "idempotent_write", timeout = "2s", max_attempts = 3)]
pub async fn send_email(
    args: SendEmail,
    ctx: &ToolCtx,
    State(mail): State<Arc<MailProvider>>,
) -> Result<EmailSent, ToolError> {
    let key = ctx.key().expect("writes are keyed");
    let message_id = mail.send(key.as_str(), &args.to, &args.subject).await;
    Ok(EmailSent { message_id })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateTicket {
    pub title: String,
    /// 1 (urgent) to 4 (low).
    #[schemars(range(min = 1, max = 4))]
    pub priority: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    pub number: usize,
}

/// Open a support ticket.
#[tool(class = "non_idempotent_write")]
pub async fn create_ticket(
    args: CreateTicket,
    State(tickets): State<Arc<Tickets>>,
) -> Result<Ticket, ToolError> {
    if !(1..=4).contains(&args.priority) {
        return Err(ToolError::permanent(format!(
            "priority {} is out of range 1..=4",
            args.priority
        )));
    }
    let mut created = tickets.created.lock().unwrap();
    created.push(args.title);
    Ok(Ticket {
        number: created.len(),
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Credit {
    pub account: String,
    pub amount: i64,
}

/// The anti-pattern: a *delta* declared `idempotent_write`. Retrying it
/// after a timeout applies the delta again. Do not write tools like this.
#[tool(class = "idempotent_write", timeout = "1s", max_attempts = 3)]
pub async fn add_credit_delta(
    args: Credit,
    State(ledger): State<Arc<Ledger>>,
) -> Result<i64, ToolError> {
    Ok(ledger.add(args.amount).await)
}

/// The same intent as a keyed write: the grant id is the idempotency key,
/// so the ledger applies it once however often it is retried.
#[tool(class = "idempotent_write", timeout = "1s", max_attempts = 3)]
pub async fn grant_credit(
    args: Credit,
    ctx: &ToolCtx,
    State(ledger): State<Arc<Ledger>>,
) -> Result<i64, ToolError> {
    let grant_id = ctx.key().expect("writes are keyed");
    Ok(ledger.grant(grant_id.as_str(), args.amount).await)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteAccount {
    pub account: String,
}

/// Delete a customer's account and all its data.
#[tool(class = "irreversible")]
pub async fn delete_account(args: DeleteAccount) -> Result<String, ToolError> {
    Ok(format!("deleted {}", args.account))
}

/// `lookup_customer` of ada: a read, with no key.
pub async fn look_up_ada(exec: &Executor<App>) {
    exec.call(
        lookup_customer,
        Lookup {
            email: "ada@example.com".into(),
        },
    )
    .await
    .unwrap();
}

/// `delete_account` of `acct_1` as call `call_id`, approved by `by` with
/// the call: its output.
pub async fn delete_approved_by(
    exec: &Executor<App>,
    by: &str,
    call_id: &str,
) -> idem::CallOutput<String> {
    exec.call_approved(
        delete_account,
        DeleteAccount {
            account: "acct_1".into(),
        },
        Approval::granted_by(by),
    )
    .call_id(call_id)
    .await
    .unwrap()
}

/// Every tool above, for dispatch.
pub fn registry() -> idem::Registry<App> {
    idem::tools![
        lookup_customer,
        send_email,
        create_ticket,
        add_credit_delta,
        grant_credit,
        delete_account
    ]
}
