//! Every operation passes through an interceptor to the wrapped store and
//! back, with the answer its kind calls for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::{Answer, Hook, Interceptor, OpKind, Operation};
use crate::audit::{AuditEvent, AuditQuery};
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::AuditAction;
use crate::record::{Fence, Outcome, OutputJson};
use crate::store::memory::tests::request;
use crate::store::{
    ClaimOutcome, Expected, ExpectedState, MemoryStore, Store, StoreError, WaitFor,
};

/// Remembers the kind of every operation it forwards.
#[derive(Debug, Default)]
struct Seen(Mutex<Vec<OpKind>>);

#[async_trait::async_trait]
impl Hook for Seen {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        self.0.lock().unwrap().push(op.kind());
        op.run(store).await
    }
}

/// Whether `answer` is the kind of answer `kind` calls for.
fn answers(kind: OpKind, answer: &Answer) -> bool {
    match kind {
        OpKind::Claim => matches!(answer, Answer::Claim(_)),
        OpKind::Checkpoint | OpKind::Renew | OpKind::Complete | OpKind::Release | OpKind::Close => {
            matches!(answer, Answer::Done)
        }
        OpKind::Get | OpKind::Wait => matches!(answer, Answer::Record(_)),
        OpKind::Replace => matches!(answer, Answer::Replaced(_)),
        OpKind::AppendAudit => matches!(answer, Answer::Appended(_)),
        OpKind::Audit => matches!(answer, Answer::Audit(_)),
        OpKind::Scan | OpKind::ScanOpen => matches!(answer, Answer::Scan(_)),
        OpKind::Sweep => matches!(answer, Answer::Swept(_)),
        OpKind::Now => matches!(answer, Answer::Now(_)),
    }
}

#[tokio::test]
async fn every_operation_reaches_the_hook_and_the_store_and_comes_back_with_its_answer() {
    let store = Interceptor::new(Arc::new(MemoryStore::new()), Seen::default());
    let key = IdempotencyKey::parse(&"ab".repeat(32)).unwrap();
    let fingerprint = Fingerprint::new("cd".repeat(32));
    let event = AuditEvent {
        seq: None,
        at: Timestamp(0),
        by: "test".to_owned(),
        action: AuditAction::Deleted,
        reason: None,
        key: key.clone(),
        tool: "t".to_owned(),
        namespace: None,
        fingerprint: fingerprint.clone(),
        before: None,
        after: None,
    };
    let query = AuditQuery::default();
    let expected = Expected {
        fence: Fence(1),
        state: ExpectedState::Completed,
    };
    for kind in OpKind::ALL {
        // Exhaustive: a kind added without a case here does not compile.
        let op = match kind {
            OpKind::Claim => continue, // below, with a request to own the key
            OpKind::Checkpoint => Operation::Checkpoint {
                key: &key,
                fence: Fence(1),
                step: "s",
                value: &Value::Null,
                lease: Duration::from_secs(1),
            },
            OpKind::Renew => Operation::Renew {
                key: &key,
                fence: Fence(1),
                lease: Duration::from_secs(1),
            },
            OpKind::Complete => continue, // below, by the owner
            OpKind::Release => continue,  // below, by the owner
            OpKind::Get => Operation::Get { key: &key },
            OpKind::Replace => Operation::Replace {
                key: &key,
                expected,
                new: None,
                audit: None,
            },
            OpKind::AppendAudit => Operation::AppendAudit { event: &event },
            OpKind::Audit => Operation::Audit {
                query: &query,
                cursor: None,
                limit: 10,
            },
            OpKind::Scan => Operation::Scan {
                cursor: None,
                limit: 10,
            },
            OpKind::ScanOpen => Operation::ScanOpen {
                cursor: None,
                limit: 10,
            },
            OpKind::Wait => Operation::Wait {
                key: &key,
                until: WaitFor::Completion,
                timeout: Duration::ZERO,
            },
            OpKind::Sweep => Operation::Sweep,
            OpKind::Now => Operation::Now,
            OpKind::Close => continue, // last
        };
        // A checkpoint, renewal or replace of a key nobody owns is refused:
        // that is the store's answer, and it came back through the hook.
        match store.call(op).await {
            Ok(answer) => assert!(answers(kind, &answer), "{kind}: {}", answer.name()),
            Err(StoreError::StaleFence { .. }) => {}
            Err(e) => panic!("{kind}: {e}"),
        }
    }
    let req = request(&key, &fingerprint);
    // Through `call`, not the fast path, so that the hook sees the claim.
    let Ok(Answer::Claim(ClaimOutcome::Acquired { fence: claimed, .. })) =
        store.call(Operation::Claim(&req)).await
    else {
        panic!("the claim acquires the key");
    };
    for op in [
        Operation::Complete {
            key: &key,
            fence: claimed,
            outcome: &Outcome::Success {
                output: OutputJson::new(&"ok").unwrap(),
            },
            ttl: Duration::from_secs(60),
        },
        Operation::Release {
            key: &key,
            fence: claimed,
        },
        Operation::Close,
    ] {
        let kind = op.kind();
        match store.call(op).await {
            Ok(answer) => assert!(answers(kind, &answer), "{kind}: {}", answer.name()),
            // The release comes after the completion: nobody owns the key.
            Err(StoreError::StaleFence { .. }) if kind == OpKind::Release => {}
            Err(e) => panic!("{kind}: {e}"),
        }
    }
    let mut seen = store.hook().0.lock().unwrap().clone();
    seen.sort_by_key(|k| OpKind::ALL.iter().position(|a| a == k));
    seen.dedup();
    assert_eq!(seen, OpKind::ALL, "every kind went through the hook");
}
