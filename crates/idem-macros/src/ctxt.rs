//! Error collection: every mistake in one build, not one per build.

use std::fmt::Display;

use quote::ToTokens;

/// Collects errors while the input is parsed and validated; [`Ctxt::check`]
/// combines them into one `syn::Error` whose parts keep their own spans.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Vec<syn::Error>,
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
        self.errors.push(error);
    }

    /// How many errors have been recorded so far: a stage compares the
    /// count before and after itself to know whether its part was sound.
    pub(crate) fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// `Ok` if nothing was recorded, else every recorded error, in the
    /// order they were recorded.
    pub(crate) fn check(self) -> syn::Result<()> {
        let mut errors = self.errors.into_iter();
        match errors.next() {
            Some(mut first) => {
                first.extend(errors);
                Err(first)
            }
            None => Ok(()),
        }
    }
}
