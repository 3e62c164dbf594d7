//! Phase 1: the call's key, from its canonical arguments and whatever the
//! tool's key derivation reads (call id, run and step, natural or custom key
//! material). See [`crate::key`] for the derivation itself.

use crate::error::IdemError;
use crate::key::{key_for_call, CallKeySource, CanonicalArgs, IdempotencyKey, Namespace};
use crate::tool::KeyMaterial;

use super::CallEnv;

/// A call's key and what its claim compares.
pub(super) struct CallKey {
    pub(super) key: IdempotencyKey,
    /// The canonical arguments (their fingerprint is stored with the record).
    pub(super) args: CanonicalArgs,
    /// Whether another fingerprint under this key is a key reuse.
    pub(super) check_fingerprint: bool,
    /// The tenant the key belongs to.
    pub(super) namespace: Namespace,
}

impl CallEnv<'_> {
    /// Canonicalize `args` and derive the key; nothing has touched the
    /// store yet, so an error here means nothing ran.
    pub(super) fn key<A: serde::Serialize>(
        &self,
        args: &A,
        material: Option<KeyMaterial>,
    ) -> Result<CallKey, IdemError> {
        let canonical =
            CanonicalArgs::from_serialize(args).map_err(|e| IdemError::InvalidArguments {
                tool: self.name().to_owned(),
                detail: e.to_string(),
            })?;
        self.key_of(canonical, material.as_ref())
    }

    /// The type-independent part of [`CallEnv::key`].
    fn key_of(
        &self,
        args: CanonicalArgs,
        material: Option<&KeyMaterial>,
    ) -> Result<CallKey, IdemError> {
        let namespace = self.namespace();
        let source = CallKeySource {
            call_id: self.call_id.as_deref(),
            run: self.run.run_id.as_deref().map(|run| (run, self.run.step)),
            args: &args,
            namespace: &namespace,
            clock: &*self.core.clock,
        };
        let (key, check_fingerprint) =
            key_for_call(&self.spec, material, source).map_err(|source| IdemError::Key {
                tool: self.name().to_owned(),
                source,
            })?;
        self.span.record("key", key.as_str());
        Ok(CallKey {
            key,
            args,
            check_fingerprint,
            namespace,
        })
    }
}
