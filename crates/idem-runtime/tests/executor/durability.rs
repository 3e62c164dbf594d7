//! Durability follows the class: the executor asks the store to make a
//! claim durable before the tool runs for every class that is never re-run
//! on an unknown outcome, and lets an `idempotent_write`'s claim be lost
//! with a power cut (it would only run again with the same key).

use std::sync::{Arc, Mutex};

use crate::support::{msg, ChargeCard, DeleteAccount, LookUp, SendEmail, World};
use idem_runtime::approval::Approval;
use idem_runtime::class::ClassKind;
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, Operation};
use idem_runtime::store::{ClaimRequest, LocalClaim, MemoryStore, Store, StoreError};
use idem_runtime::Executor;

/// Notes the tool and the durability asked for of every claim, whichever
/// way it reaches the store, and every other write.
#[derive(Debug, Default)]
struct Claims {
    seen: Mutex<Vec<String>>,
}

impl Claims {
    fn note(&self, req: &ClaimRequest<'_>) {
        let durable = if req.durable { "durable" } else { "relaxed" };
        self.seen
            .lock()
            .unwrap()
            .push(format!("{} claim {durable}", req.tool));
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl Hook for Claims {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match &op {
            Operation::Claim(req) => self.note(req),
            op if op.kind().writes() => self.seen.lock().unwrap().push(op.kind().to_string()),
            _ => {}
        }
        op.run(store).await
    }

    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        self.note(req);
        store.fast_path()?.claim_local(req)
    }
}

#[tokio::test]
async fn only_an_idempotent_writes_claim_may_be_lost_with_a_power_cut() {
    let store = Arc::new(Interceptor::new(MemoryStore::new(), Claims::default()));
    let world = Arc::new(World::default());
    let exec = Executor::builder(store.clone())
        .state(world.clone())
        .build();
    let claims = store.hook();

    exec.call(SendEmail, msg("ada"))
        .call_id("call_1")
        .await
        .unwrap();
    assert_eq!(
        claims.take(),
        ["send_email claim relaxed", "complete"],
        "an idempotent write's claim need not reach the disk; its outcome must"
    );

    exec.call(ChargeCard, msg("ada"))
        .call_id("call_2")
        .await
        .unwrap();
    assert_eq!(
        claims.take(),
        ["charge_card claim durable", "checkpoint", "complete"],
        "a non-idempotent write's claim and started mark are durable before it runs"
    );

    exec.call_approved(DeleteAccount, msg("ada"), Approval::granted_by("alice"))
        .call_id("call_3")
        .await
        .unwrap();
    let seen = claims.take();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("delete_account claim durable")
    );
    assert!(
        !seen.iter().any(|s| s.contains("relaxed")),
        "every write of an irreversible call is durable: {seen:?}"
    );

    exec.call(LookUp, msg("ada")).await.unwrap();
    assert!(claims.take().is_empty(), "a read touches no store");

    // The duplicate of the idempotent write asks the same and writes nothing.
    exec.call(SendEmail, msg("ada"))
        .call_id("call_1")
        .await
        .unwrap();
    assert_eq!(claims.take(), ["send_email claim relaxed"]);
    // Three writes and the read, each once.
    assert_eq!(world.effects().len(), 4);
}

#[test]
fn the_class_table_says_which_claims_are_durable() {
    let durable: Vec<_> = ClassKind::ALL
        .into_iter()
        .filter(|c| c.needs_durable_claim())
        .map(ClassKind::as_str)
        .collect();
    assert_eq!(durable, ["non_idempotent_write", "irreversible"]);
}
