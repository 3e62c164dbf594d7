//! `#[tool]` through the public API: what the generated registry entries
//! say about themselves (name, description, schema, spec, key material),
//! and that they run through the executor with their class's guarantees.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::provider::OpenAi;
use idem::{KeyMaterial, KeySpec, Reconciled, RetryPolicy};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A fake mail provider: what it sent, by Message-ID.
#[derive(Default)]
struct Mailer {
    sent: Mutex<Vec<(String, String)>>,
    attempts: AtomicUsize,
}

impl Mailer {
    fn sent(&self) -> Vec<(String, String)> {
        self.sent.lock().unwrap().clone()
    }
}

/// The application state every tool can reach through `State<…>`.
#[derive(Clone, Default)]
struct App {
    mailer: Arc<Mailer>,
    region: Region,
}

#[derive(Clone, Default, Debug, PartialEq)]
struct Region(&'static str);

impl FromRef<App> for Arc<Mailer> {
    fn from_ref(app: &App) -> Self {
        app.mailer.clone()
    }
}

impl FromRef<App> for Region {
    fn from_ref(app: &App) -> Self {
        app.region.clone()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendEmail {
    /// The recipient.
    to: String,
    subject: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmailSent {
    message_id: String,
}

/// Send an email to a customer.
///
/// The Message-ID is derived from the idempotency key.
#[tool(class = "idempotent_write", timeout = "30s", max_attempts = 3)]
async fn send_email(
    args: SendEmail,
    ctx: &ToolCtx,
    State(mailer): State<Arc<Mailer>>,
) -> Result<EmailSent, ToolError> {
    mailer.attempts.fetch_add(1, Ordering::SeqCst);
    let message_id = format!("<{}@idem.test>", ctx.key().expect("write tools are keyed"));
    mailer
        .sent
        .lock()
        .unwrap()
        .push((message_id.clone(), args.to));
    Ok(EmailSent { message_id })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Lookup {
    email: String,
}

/// Look a customer up by email.
#[tool(class = "read")]
fn lookup_customer(args: Lookup, State(region): State<Region>) -> Result<String, ToolError> {
    Ok(format!("{} in {}", args.email, region.0))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateCustomer {
    email: String,
    country: String,
    /// Free text: not part of the natural key.
    note: String,
}

fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Create a customer unless one with this email and country exists.
#[tool(
    class = "non_idempotent_write",
    name = "create_customer_v2",
    key = natural(fields(email = normalize_email, country), window = "24h"),
    ttl = "7d",
    key_version = 2,
)]
async fn create_customer(args: CreateCustomer) -> Result<u64, ToolError> {
    Ok(args.email.len() as u64)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Refund {
    order: u64,
    cents: u64,
}

fn refund_key(args: &Refund) -> String {
    format!("refund-{}", args.order)
}

/// Refund an order.
#[tool(
    class = "irreversible",
    description = "Refund an order in full. Cannot be undone.",
    key = custom(refund_key),
    reconcile = find_refund,
)]
async fn refund(args: Refund, State(mailer): State<Arc<Mailer>>) -> Result<String, ToolError> {
    let _ = mailer;
    Ok(format!("refunded {} cents", args.cents))
}

async fn find_refund(
    args: &Refund,
    _ctx: &ToolCtx,
    State(_mailer): State<Arc<Mailer>>,
) -> Result<Reconciled<String>, ToolError> {
    Ok(if args.order == 7 {
        Reconciled::Applied("found in the ledger".to_owned())
    } else {
        Reconciled::NotApplied
    })
}

fn executor(app: &App) -> Executor<App> {
    Executor::builder(MemoryStore::new())
        .state(app.clone())
        .build()
}

fn class_of<T: ToolDef>() -> ClassKind {
    <T::Class as idem::Class>::KIND
}

#[test]
fn the_function_name_names_the_tool_and_its_doc_comment_describes_it() {
    let spec = send_email::SPEC;
    assert_eq!(spec.name, "send_email");
    assert_eq!(
        spec.description,
        "Send an email to a customer.\n\nThe Message-ID is derived from the idempotency key."
    );
    assert_eq!(class_of::<send_email>(), ClassKind::IdempotentWrite);
    assert_eq!(spec.key, KeySpec::Default);
    assert_eq!(spec.key_version, idem::key::DEFAULT_KEY_VERSION);
    assert_eq!(spec.timeout, Some(Duration::from_secs(30)));
    assert_eq!(spec.max_attempts, Some(3));
    assert_eq!(spec.ttl, None);
    assert!(!spec.has_reconcile);
}

#[test]
fn options_land_in_the_spec() {
    let spec = create_customer::SPEC;
    assert_eq!(spec.name, "create_customer_v2");
    assert_eq!(class_of::<create_customer>(), ClassKind::NonIdempotentWrite);
    assert_eq!(
        spec.key,
        KeySpec::Natural {
            fields: &["email", "country"],
            window: Some(Duration::from_secs(86_400)),
        }
    );
    assert_eq!(spec.ttl, Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(spec.key_version, 2);
    assert_eq!(spec.max_attempts, None);

    let spec = refund::SPEC;
    assert_eq!(
        spec.description,
        "Refund an order in full. Cannot be undone."
    );
    assert_eq!(class_of::<refund>(), ClassKind::Irreversible);
    assert_eq!(spec.key, KeySpec::Custom);
    assert!(spec.has_reconcile);

    assert_eq!(class_of::<lookup_customer>(), ClassKind::Read);
}

#[test]
fn a_natural_key_is_made_of_the_named_fields_after_their_normalisers() {
    let args = |email: &str, note: &str| CreateCustomer {
        email: email.to_owned(),
        country: "GB".to_owned(),
        note: note.to_owned(),
    };
    let material = create_customer::key_material(&args("  Ada@Example.com ", "first try"));
    assert_eq!(
        material,
        Some(KeyMaterial::Natural(serde_json::json!({
            "email": "ada@example.com",
            "country": "GB",
        })))
    );
    // Different wording of the same customer: the same key material.
    assert_eq!(
        create_customer::key_material(&args("ada@example.com", "second try")),
        material
    );
}

#[test]
fn a_custom_key_comes_from_the_key_function() {
    let material = refund::key_material(&Refund {
        order: 7,
        cents: 100,
    });
    assert_eq!(material, Some(KeyMaterial::Custom("refund-7".to_owned())));
    assert_eq!(
        send_email::key_material(&SendEmail {
            to: "a".into(),
            subject: "b".into()
        }),
        None
    );
}

#[test]
fn the_schema_describes_the_arguments() {
    let schema = serde_json::to_value(send_email::input_schema()).unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["to"]["description"], "The recipient.");
    assert_eq!(schema["properties"]["subject"]["type"], "string");
}

#[test]
fn an_output_type_with_a_json_schema_gives_the_tool_an_output_schema() {
    // `u64` has a schema; `EmailSent` derives none, which is no error.
    let schema = serde_json::to_value(create_customer::output_schema().unwrap()).unwrap();
    assert_eq!(schema["type"], "integer");
    assert!(send_email::output_schema().is_none());
}

#[tokio::test]
async fn the_generated_call_runs_the_body_with_its_state() {
    let app = App {
        region: Region("eu-west"),
        ..App::default()
    };
    let ctx = ToolCtx::new("lookup_customer", ClassKind::Read);
    let out = Tool::<App>::call(
        &lookup_customer,
        Lookup {
            email: "ada@example.com".into(),
        },
        &ctx,
        &app,
    )
    .await
    .unwrap();
    assert_eq!(out, "ada@example.com in eu-west");
}

#[tokio::test]
async fn the_reconcile_hook_gets_the_arguments_and_the_tools_state() {
    let app = App::default();
    let ctx = ToolCtx::new("refund", ClassKind::Irreversible);
    let found = Tool::<App>::reconcile(&refund, &Refund { order: 7, cents: 1 }, &ctx, &app)
        .await
        .unwrap();
    assert_eq!(found, Reconciled::Applied("found in the ledger".to_owned()));
    // A tool without a hook cannot tell.
    let ctx = ToolCtx::new("send_email", ClassKind::IdempotentWrite);
    let args = SendEmail {
        to: "a".into(),
        subject: "b".into(),
    };
    let unknown = Tool::<App>::reconcile(&send_email, &args, &ctx, &app).await;
    assert_eq!(unknown.unwrap(), Reconciled::Unknown);
}

#[tokio::test]
async fn model_calls_send_email_twice_with_the_same_call_id_one_email_is_sent() {
    let app = App::default();
    let exec = executor(&app);
    let args = SendEmail {
        to: "ada@example.com".into(),
        subject: "Your invoice".into(),
    };
    let first = exec
        .call(send_email, args.clone())
        .call_id("call_1")
        .retry(RetryPolicy::exponential())
        .await
        .unwrap();
    let second = exec.call(send_email, args).call_id("call_1").await.unwrap();

    assert_eq!(
        app.mailer.sent().len(),
        1,
        "one email, whatever the model does"
    );
    assert!(!first.meta.deduplicated);
    assert!(second.meta.deduplicated);
    assert_eq!(first.output, second.output);
    let key = first.meta.key.expect("write tools are keyed");
    assert_eq!(first.output.message_id, format!("<{key}@idem.test>"));
}

#[tokio::test]
async fn an_irreversible_tool_runs_with_an_approval() {
    let app = App::default();
    let exec = executor(&app);
    let called = exec
        .call_approved(
            refund,
            Refund {
                order: 1,
                cents: 250,
            },
            Approval::granted_by("ops@example.com"),
        )
        .call_id("call_refund")
        .await
        .unwrap();
    assert_eq!(called.output, "refunded 250 cents");
}

#[tokio::test]
async fn tools_builds_a_registry_the_dispatcher_can_call_by_name() {
    let registry: idem::Registry<App> =
        tools![send_email, lookup_customer, create_customer, refund];
    let names: Vec<&str> = registry.names().collect();
    assert_eq!(
        names,
        [
            "send_email",
            "lookup_customer",
            "create_customer_v2",
            "refund"
        ]
    );
    let openai = registry.tools_for::<OpenAi>();
    let described = openai
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["description"] == "Look a customer up by email.");
    assert!(described, "{openai:#}");
}
