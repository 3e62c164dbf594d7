//! The three rows of the per-class tables: which tool each calls and how
//! its claims reach the store (the "before" row through [`ForceDurable`]).

use std::sync::Arc;

use idem::{tool, Executor, ToolError};
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, Operation};
use idem_runtime::store::{ClaimRequest, LocalClaim, Store, StoreError};

use crate::common::{args, send, send_email, EmailSent, SendEmail};
use idem_runtime::store::StoreExt;

/// The same no-op body as `send_email`, as a `non_idempotent_write`: its
/// first call claims durably, marks the attempt as started durably, runs,
/// and completes durably.
#[tool(class = "non_idempotent_write")]
pub async fn open_ticket(args: SendEmail) -> Result<EmailSent, ToolError> {
    Ok(send(&args))
}

/// Which calls a row of the per-class tables makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `send_email` with every claim forced durable: before 42f7900.
    Before,
    /// `send_email`, an `idempotent_write`, as the executor claims it now.
    Idempotent,
    /// `open_ticket`, a `non_idempotent_write`.
    NonIdempotent,
}

impl Class {
    /// In the order the tables list them.
    pub const ALL: [Class; 3] = [Class::Before, Class::Idempotent, Class::NonIdempotent];

    pub fn label(self) -> &'static str {
        match self {
            Class::Before => "idempotent_write, durable claims (before)",
            Class::Idempotent => "idempotent_write (after)",
            Class::NonIdempotent => "non_idempotent_write",
        }
    }

    /// Its name in the fsync child's arguments and in run names.
    pub fn tag(self) -> &'static str {
        match self {
            Class::Before => "before",
            Class::Idempotent => "idempotent",
            Class::NonIdempotent => "non-idempotent",
        }
    }

    pub fn from_tag(tag: &str) -> Class {
        Class::ALL
            .into_iter()
            .find(|c| c.tag() == tag)
            .unwrap_or_else(|| panic!("unknown class {tag:?}"))
    }

    /// An executor on `store` making this row's calls: for
    /// [`Class::Before`], through [`ForceDurable`].
    pub fn executor(self, store: Arc<dyn Store>) -> Executor {
        let store: Arc<dyn Store> = match self {
            Class::Before => Arc::new(Interceptor::new(store, ForceDurable)),
            _ => store,
        };
        Executor::builder_shared(store).build()
    }

    /// One call of this row's tool at `run`/`step`.
    pub async fn call(self, exec: &Executor, run: &str, step: u64) {
        let out = match self {
            Class::NonIdempotent => exec.call(open_ticket, args()).run(run, step).await,
            _ => exec.call(send_email, args()).run(run, step).await,
        };
        out.expect("call");
    }
}

/// Makes every claim durable, as the executor asked for every class
/// before durability followed the class.
#[derive(Debug, Default)]
pub struct ForceDurable;

#[async_trait::async_trait]
impl Hook for ForceDurable {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match op {
            Operation::Claim(req) => store
                .claim(&ClaimRequest {
                    durable: true,
                    ..req.clone()
                })
                .await
                .map(Answer::Claim),
            _ => op.run(store).await,
        }
    }

    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        store.fast_path()?.claim_local(&ClaimRequest {
            durable: true,
            ..req.clone()
        })
    }
}
