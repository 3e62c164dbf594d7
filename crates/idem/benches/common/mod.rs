//! What every benchmark shares: the tool and its arguments, and the naive
//! `Mutex<HashMap>` idempotency wrapper idem is measured against.
//!
//! The naive wrapper is the one from the background article: key =
//! SHA-256 of `run:step:tool:json(args)`, look it up in a locked map, run the
//! tool, store its JSON output. It has no canonical form, no namespaces, no
//! fingerprints, no leases, no fencing, no waiters, no retries, no classes.

use std::collections::HashMap;
use std::sync::Mutex;

use idem::{tool, ToolError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SendEmail {
    to: String,
    subject: String,
    body: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmailSent {
    message_id: String,
}

/// The tool's body: a no-op provider, so only the call path is measured.
pub fn send(args: &SendEmail) -> EmailSent {
    EmailSent {
        message_id: format!("<{}@example.com>", args.to.len()),
    }
}

/// Send an email (a no-op provider, so only idem's overhead is measured).
#[tool(class = "idempotent_write")]
pub async fn send_email(args: SendEmail) -> Result<EmailSent, ToolError> {
    Ok(send(&args))
}

/// The arguments of every call.
pub fn args() -> SendEmail {
    SendEmail {
        to: "ada@example.com".into(),
        subject: "Your invoice".into(),
        body: "Hello Ada, your invoice for November is attached.".into(),
    }
}

/// The naive wrapper.
#[derive(Default)]
pub struct Naive {
    done: Mutex<HashMap<String, String>>,
}

impl Naive {
    /// One call of `tool` at `run`/`step`.
    pub async fn call(&self, run: &str, step: u64, tool: &str, args: &SendEmail) -> EmailSent {
        let text = serde_json::to_string(args).unwrap();
        let key = hex::encode(Sha256::digest(format!("{run}:{step}:{tool}:{text}")));
        self.answer(key, args)
    }

    /// One call of `tool` keyed by the provider's call id: the same work as
    /// [`Naive::call`], the call id in place of the run and step. (Not
    /// used by the stores bench, which shares this module.)
    #[allow(dead_code)]
    pub async fn call_with_id(&self, call_id: &str, tool: &str, args: &SendEmail) -> EmailSent {
        let text = serde_json::to_string(args).unwrap();
        let key = hex::encode(Sha256::digest(format!("{call_id}:{tool}:{text}")));
        self.answer(key, args)
    }

    fn answer(&self, key: String, args: &SendEmail) -> EmailSent {
        if let Some(hit) = self.done.lock().unwrap().get(&key) {
            return serde_json::from_str(hit).unwrap();
        }
        let out = send(args);
        self.done
            .lock()
            .unwrap()
            .insert(key, serde_json::to_string(&out).unwrap());
        out
    }

    /// How many calls are recorded.
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.done.lock().unwrap().len()
    }
}
