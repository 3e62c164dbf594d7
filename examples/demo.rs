//! The main demo (grows with the executor): a claim, a duplicate, and a
//! stale owner refused, on the in-memory store.

use std::time::Duration;

use idem::key::{derive_key, CanonicalArgs, KeyInput, KeySource, Namespace};
use idem::record::Outcome;
use idem::store::{Claim, ClaimRequest, MemoryStore, Store};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new();
    let args = CanonicalArgs::from_value(
        &serde_json::json!({"to": "ada@example.com", "subject": "Your invoice"}),
    )?;
    let ns = Namespace::default();
    let key = derive_key(&KeyInput {
        version: 1,
        namespace: &ns,
        tool: "send_email",
        source: KeySource::CallId("call_9f8e7d6c5b4a"),
    })?;
    println!("key for call_9f8e7d6c5b4a: {key}");
    let req = ClaimRequest {
        key: &key,
        tool: "send_email",
        fingerprint: &args.fingerprint,
        check_fingerprint: true,
        lease: Duration::from_secs(30),
    };
    for attempt in 1..=2 {
        match store.claim(&req).await? {
            Claim::Acquired { fence, .. } => {
                println!("attempt {attempt}: acquired ({fence}); sending the email once");
                let outcome = Outcome::Success {
                    output: serde_json::json!({"message_id": format!("<{key}@idem>")}),
                };
                store
                    .complete(&key, fence, &outcome, Duration::from_secs(86_400))
                    .await?;
            }
            Claim::Completed(record) => {
                println!(
                    "attempt {attempt}: deduplicated, recorded result {:?}",
                    record.outcome()
                );
            }
            other => println!("attempt {attempt}: {other:?}"),
        }
    }
    Ok(())
}
