//! The simulated tools, implemented by hand as `#[tool]` would, one per
//! class that has effects:
//!
//! | tool | class | provider |
//! |---|---|---|
//! | `charge` | `idempotent_write` | payments: honours `Idempotency-Key` |
//! | `send_email` | `non_idempotent_write` | mailer: no keys, a searchable sent log; reconcile hook |
//! | `delete_account` | `irreversible` | accounts: no keys; approval policy, no reconcile hook |
//!
//! The two tools whose provider does not deduplicate record their intent
//! (`ctx.intent`) before calling it, as the executor's documentation asks:
//! that fenced write is the last point where a superseded owner is
//! stopped. Between it and the provider no store can stop a frozen owner
//! (only a provider that takes the key could), so the simulation never
//! freezes a worker there.
//!
//! The same tools run in worker processes killed with SIGKILL
//! ([`process`](crate::process)), on a world whose ledger is a shared file
//! and whose tool bodies wait a random while before and after each
//! provider call ([`World::shared`]), so that kills land before, between
//! and after effects.

use std::future::Future;
use std::sync::Arc;

use idem_runtime::approval::{Approval, ApprovalDecision, Callback};
use idem_runtime::class::{IdempotentWrite, Irreversible, NonIdempotentWrite};
use idem_runtime::{Reconciled, Registry, Tool, ToolCtx, ToolDef, ToolError, ToolSpec};
use serde::{Deserialize, Serialize};

use crate::faults;
use crate::world::World;

/// The tools' application state: the world they act on.
pub(crate) type App = Arc<World>;

/// Arguments of `charge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ChargeArgs {
    /// The account charged.
    pub account: String,
    /// How much.
    pub cents: u64,
}

/// Arguments of `send_email`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct EmailArgs {
    /// The recipient.
    pub to: String,
    /// The subject.
    pub subject: String,
}

/// Arguments of `delete_account`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct DeleteArgs {
    /// The account deleted.
    pub account: String,
}

/// Output of `charge`: the provider's response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Receipt {
    /// The provider's charge id.
    pub charge_id: String,
}

/// Output of `send_email`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sent {
    /// The Message-ID generated for the email.
    pub message_id: String,
}

/// Output of `delete_account`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Deleted {
    /// The request id sent to the account service.
    pub request_id: String,
}

/// `charge` (`idempotent_write`): passes its key to the payment provider.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charge;

/// `send_email` (`non_idempotent_write`): the mailer does not deduplicate;
/// the reconcile hook looks the recorded Message-ID up in its sent log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendEmail;

/// `delete_account` (`irreversible`): approved by policy, no reconcile
/// hook, so a vanished owner's outcome is surfaced as unknown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeleteAccount;

impl ToolDef for Charge {
    type Class = IdempotentWrite;
    type Args = ChargeArgs;
    type Output = Receipt;
    const SPEC: ToolSpec = ToolSpec::new("charge", "Charge an account (idempotent provider).");
}

impl ToolDef for SendEmail {
    type Class = NonIdempotentWrite;
    type Args = EmailArgs;
    type Output = Sent;
    const SPEC: ToolSpec = {
        let mut spec = ToolSpec::new("send_email", "Send an email (provider without keys).");
        spec.has_reconcile = true;
        spec
    };
}

impl ToolDef for DeleteAccount {
    type Class = Irreversible;
    type Args = DeleteArgs;
    type Output = Deleted;
    const SPEC: ToolSpec = ToolSpec::new("delete_account", "Delete an account (irreversible).");
}

/// The approval policy of both drivers: approve every call, after the
/// delay of a slow approval when that is the running worker's fault.
pub(crate) fn approvals() -> Callback {
    Callback::new(|_request| async {
        faults::approval_delay().await;
        Ok(ApprovalDecision::Approved(Approval::granted_by(
            "sim-policy",
        )))
    })
}

/// The tools, registered.
pub(crate) fn registry() -> Registry<App> {
    Registry::new()
        .with(Charge)
        .with(SendEmail)
        .with(DeleteAccount)
}

/// The key of a keyed call; the executor always gives one.
fn key_of(ctx: &ToolCtx) -> Result<String, ToolError> {
    ctx.key()
        .map(ToString::to_string)
        .ok_or_else(|| ToolError::permanent("a keyed tool ran without a key"))
}

/// The way a tool whose provider does not deduplicate reaches it: record
/// the intent (a fenced write: a superseded owner stops here), check that
/// the key is still owned, then call the provider, which applies `effect`
/// after its latency.
async fn intent_then_effect(
    ctx: &ToolCtx,
    world: &World,
    intent: &str,
    effect: impl FnOnce(),
) -> Result<(), ToolError> {
    ctx.intent(&intent).await?;
    if ctx.is_superseded() {
        return Err(ToolError::transient(
            "superseded before calling the provider",
        ));
    }
    before_provider(world).await;
    effect();
    after_provider(world).await;
    Ok(())
}

/// Before a provider call: the provider's latency (or a slow provider),
/// and the world's pace.
async fn before_provider(world: &World) {
    faults::provider_latency().await;
    world.pace().await;
}

/// After a provider applied an effect: a crash or a lost answer may
/// strike, and the world's pace.
async fn after_provider(world: &World) {
    faults::provider_applied().await;
    world.pace().await;
}

impl Tool<App> for Charge {
    fn call(
        &self,
        args: ChargeArgs,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Receipt, ToolError>> + Send {
        let (ctx, world) = (ctx.clone(), world.clone());
        async move {
            faults::tool_starts().await;
            let key = key_of(&ctx)?;
            before_provider(&world).await;
            let response = world.charge(&key, &args.account, args.cents);
            after_provider(&world).await;
            serde_json::from_value(response).map_err(|e| ToolError::permanent(e.to_string()))
        }
    }
}

impl Tool<App> for SendEmail {
    fn call(
        &self,
        args: EmailArgs,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Sent, ToolError>> + Send {
        let (ctx, world) = (ctx.clone(), world.clone());
        async move {
            faults::tool_starts().await;
            let key = key_of(&ctx)?;
            // A fresh Message-ID per attempt, recorded before the send so a
            // reconcile hook can look it up.
            let message_id = format!(
                "<{}.{}@sim.invalid>",
                world.fresh_id(),
                crate::world::short(&key)
            );
            intent_then_effect(&ctx, &world, &message_id, || {
                world.send_mail(&key, &message_id, &args.to)
            })
            .await?;
            Ok(Sent { message_id })
        }
    }

    fn reconcile(
        &self,
        _args: &EmailArgs,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Reconciled<Sent>, ToolError>> + Send {
        let (ctx, world) = (ctx.clone(), world.clone());
        async move {
            faults::reconcile_starts().await;
            let answer = match ctx.recorded_intent::<String>() {
                // Intent before effect: no intent, no email.
                None => Ok(Reconciled::NotApplied),
                Some(Err(e)) => Err(e),
                Some(Ok(message_id)) if world.mail_was_sent(&message_id) => {
                    Ok(Reconciled::Applied(Sent { message_id }))
                }
                Some(Ok(_)) => Ok(Reconciled::NotApplied),
            };
            if let Ok(found) = &answer {
                world
                    .counters
                    .reconciled
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                world.event(format!(
                    "reconcile send_email: {}",
                    match found {
                        Reconciled::Applied(s) => format!("applied {}", s.message_id),
                        Reconciled::NotApplied => "not applied".into(),
                        Reconciled::Unknown => "unknown".into(),
                    }
                ));
            }
            answer
        }
    }
}

impl Tool<App> for DeleteAccount {
    fn call(
        &self,
        args: DeleteArgs,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Deleted, ToolError>> + Send {
        let (ctx, world) = (ctx.clone(), world.clone());
        async move {
            faults::tool_starts().await;
            let key = key_of(&ctx)?;
            let request_id = format!("del-{}", world.fresh_id());
            intent_then_effect(&ctx, &world, &request_id, || {
                world.delete_account(&key, &request_id, &args.account)
            })
            .await?;
            Ok(Deleted { request_id })
        }
    }
}
