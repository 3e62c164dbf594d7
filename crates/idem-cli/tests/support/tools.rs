//! The tools the scenarios call for real, in the test process: a card
//! charge that can hang past its timeout (a `non_idempotent_write`, so the
//! outcome becomes unknown), and an account deletion (`irreversible`) whose
//! approval a person gives or refuses from the command line, and a card
//! store whose arguments are kept out of the store.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::approval::{ApprovalDecision, Callback};
use idem::dispatch::{Arguments, ToolCall};
use idem::prelude::*;
use idem::CallOutput;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A payment provider without idempotency keys.
#[derive(Default)]
pub struct Payments {
    /// Charges made.
    pub charges: AtomicUsize,
    /// The next charge is made, but its response never arrives.
    pub hang_next: AtomicBool,
}

/// Accounts that can be deleted.
#[derive(Default)]
pub struct Accounts {
    /// Deletions made.
    pub deleted: AtomicUsize,
}

#[derive(Clone, Default)]
pub struct App {
    pub payments: Arc<Payments>,
    pub accounts: Arc<Accounts>,
}

impl App {
    pub fn charges(&self) -> usize {
        self.payments.charges.load(Ordering::SeqCst)
    }

    pub fn deletions(&self) -> usize {
        self.accounts.deleted.load(Ordering::SeqCst)
    }
}

impl FromRef<App> for Arc<Payments> {
    fn from_ref(app: &App) -> Self {
        app.payments.clone()
    }
}

impl FromRef<App> for Arc<Accounts> {
    fn from_ref(app: &App) -> Self {
        app.accounts.clone()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Charge {
    pub customer: String,
    pub cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charged {
    pub charge_id: String,
}

/// Charge a customer's card.
#[tool(class = "non_idempotent_write", timeout = "300ms")]
pub async fn charge_card(
    args: Charge,
    State(payments): State<Arc<Payments>>,
) -> Result<Charged, ToolError> {
    let n = payments.charges.fetch_add(1, Ordering::SeqCst) + 1;
    if payments.hang_next.swap(false, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    Ok(Charged {
        charge_id: format!("ch_{n}_{}_{}", args.customer, args.cents),
    })
}

/// The key of `charge_card`'s call `call_id` in the default namespace.
pub fn charge_key(call_id: &str) -> IdempotencyKey {
    idem::key::derive_key(&idem::key::KeyInput {
        version: 1,
        namespace: &Namespace::default(),
        tool: "charge_card",
        source: idem::key::KeySource::CallId(call_id),
    })
    .unwrap()
}

/// The charge of the scenarios: ada, 49 dollars.
pub fn ada() -> Charge {
    Charge {
        customer: "ada".into(),
        cents: 4900,
    }
}

/// A charge that is made but whose response never arrives: recorded as
/// unknown. Returns the call id.
pub async fn timed_out_charge(exec: &Executor<App>, app: &App, namespace: &str) -> String {
    let call_id = super::unique("call");
    app.payments
        .hang_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = exec
        .call(charge_card, ada())
        .call_id(&call_id)
        .namespace(ns(namespace))
        .await
        .unwrap_err();
    assert!(
        matches!(err, IdemError::OutcomeUnknown { .. }),
        "a timed-out non-idempotent write is unknown, not {err}"
    );
    call_id
}

/// The model's retry of the unknown charge `call_id` in `namespace`,
/// once a person resolved it as succeeded with `charge_id`: it gets that
/// output, deduplicated, and the card was charged once.
pub async fn the_duplicate_gets(
    charge_id: &str,
    exec: &Executor<App>,
    app: &App,
    call_id: &str,
    namespace: &str,
) {
    let duplicate = retry_charge(exec, call_id, namespace)
        .await
        .expect("the duplicate gets the resolution");
    assert_eq!(
        duplicate.output,
        Charged {
            charge_id: charge_id.into()
        }
    );
    assert!(duplicate.meta.deduplicated);
    assert_eq!(app.charges(), 1, "charged once");
}

/// The model's retry of the charge `call_id` in `namespace`: the same
/// arguments under the same call id.
pub async fn retry_charge(
    exec: &Executor<App>,
    call_id: &str,
    namespace: &str,
) -> Result<CallOutput<Charged>, IdemError> {
    exec.call(charge_card, ada())
        .call_id(call_id)
        .namespace(ns(namespace))
        .await
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SaveCard {
    pub customer: String,
    pub number: String,
}

/// Save a customer's card number: its arguments stay out of the store.
#[tool(class = "idempotent_write", store_args = false)]
pub async fn save_card(args: SaveCard) -> Result<String, ToolError> {
    Ok(format!("card saved for {}", args.customer))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeleteAccount {
    pub customer: String,
}

/// Delete a customer's account and all its data.
#[tool(class = "irreversible")]
pub async fn delete_account(
    args: DeleteAccount,
    State(accounts): State<Arc<Accounts>>,
) -> Result<String, ToolError> {
    accounts.deleted.fetch_add(1, Ordering::SeqCst);
    Ok(format!("deleted {}", args.customer))
}

/// What the approval policy answers: a person decides later.
pub const ASK: &str = "ask the account owner in #ops";

/// An executor on the store at `url`, whose approval policy leaves every
/// irreversible call pending, and whose calls wait `approval_wait` for a
/// decision.
pub async fn executor(url: &str, app: &App, approval_wait: Duration) -> Executor<App> {
    let store = idem::store::connect(url)
        .await
        .expect("connect to the store");
    Executor::builder_shared(store)
        .state(app.clone())
        .worker("test-worker:1")
        .approvals(Callback::new(|_| async {
            Ok(ApprovalDecision::Pending {
                message: ASK.to_owned(),
            })
        }))
        .approval_wait(approval_wait)
        .build()
}

/// A dispatcher (model tool calls by name) over [`executor`].
pub async fn dispatcher(url: &str, app: &App, approval_wait: Duration) -> Dispatcher<App> {
    Dispatcher::new(
        executor(url, app, approval_wait).await,
        idem::tools![charge_card, delete_account],
    )
}

/// The model's call `delete_account {customer}` with call id `id`.
pub fn delete_call(id: &str, customer: &str) -> ToolCall {
    ToolCall {
        id: Some(id.to_owned()),
        name: "delete_account".to_owned(),
        arguments: Arguments::Json(json!({ "customer": customer })),
    }
}

/// Calls of tenant `namespace`.
pub fn tenant(namespace: &str) -> RunContext {
    RunContext::default().namespace(Namespace::new(namespace).unwrap())
}

/// `call` of tenant `namespace` sent (again) through `agent`: assert that
/// it still waits for a person's approval (nothing ran).
pub async fn still_waits(agent: &Dispatcher<App>, call: &ToolCall, namespace: &str) {
    let again = agent.dispatch_one(call.clone(), &tenant(namespace)).await;
    assert!(
        matches!(again.result, Err(IdemError::ApprovalPending { .. })),
        "still awaiting approval: {:?}",
        again.result
    );
}

/// Tenant `namespace` as a namespace.
pub fn ns(namespace: &str) -> Namespace {
    Namespace::new(namespace).unwrap()
}
