//! Error collection: every mistake in one build, not one per build.

use std::fmt::Display;

use quote::ToTokens;

/// Collects errors while the input is parsed and validated; [`Ctxt::check`]
/// combines them into one `syn::Error` whose parts keep their own spans.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Option<syn::Error>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt::default()
    }

    /// Record an error spanned at `tokens`.
    pub(crate) fn error_spanned_by(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.syn_error(syn::Error::new_spanned(tokens, message));
    }

    /// Record an error at `span`.
    pub(crate) fn error_at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.syn_error(syn::Error::new(span, message));
    }

    /// Record an error produced by syn.
    pub(crate) fn syn_error(&mut self, error: syn::Error) {
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    /// `Ok` if nothing was recorded, else every recorded error.
    pub(crate) fn check(self) -> syn::Result<()> {
        match self.errors {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}
