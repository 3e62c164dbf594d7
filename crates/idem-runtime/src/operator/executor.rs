//! The [`Executor`]'s shortcuts to operator actions on its store. They
//! live here so that the executor never depends on the operator: the
//! operator is built on the executor's store, not the other way round.

use crate::approval::Approval;
use crate::executor::Executor;

impl<S: Send + Sync + 'static> Executor<S> {
    /// Operator actions (list, approve, deny, resolve) on this executor's
    /// store; records it settles are kept for the executor's TTL.
    pub fn operator(&self) -> crate::operator::Operator {
        crate::operator::Operator::new(self.store().clone()).ttl(self.config().ttl)
    }

    /// Approve the call awaiting approval under `key`: the next call with
    /// that key runs it once. See
    /// [`Operator::approve`](crate::operator::Operator::approve).
    pub async fn approve(
        &self,
        key: &crate::key::IdempotencyKey,
        approval: Approval,
    ) -> Result<crate::record::Record, crate::operator::OperatorError> {
        self.operator().approve(key, approval).await
    }

    /// Deny the call awaiting approval under `key`: it never runs, and
    /// every call with that key gets `reason`. See
    /// [`Operator::deny`](crate::operator::Operator::deny).
    pub async fn deny(
        &self,
        key: &crate::key::IdempotencyKey,
        by: &str,
        reason: &str,
    ) -> Result<crate::record::Record, crate::operator::OperatorError> {
        self.operator().deny(key, by, reason).await
    }

    /// Calls awaiting approval that match `filter`.
    pub async fn pending(
        &self,
        filter: &crate::operator::Filter,
    ) -> Result<Vec<crate::record::Record>, crate::operator::OperatorError> {
        self.operator().pending(filter).await
    }
}
