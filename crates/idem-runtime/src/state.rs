//! Application state for tools, without globals.
//!
//! An executor owns one state value `S` (typically a `Clone` struct of
//! `Arc`s: an HTTP client, a mailer, a database pool). A tool asks for the
//! part it needs with a [`State<T>`] parameter; `T` is taken from `S` through
//! [`FromRef`], the way axum extractors do, and a tool whose state the
//! executor cannot provide does not compile.
//!
//! ```
//! use idem_runtime::state::{FromRef, State};
//! use std::sync::Arc;
//!
//! #[derive(Clone)]
//! struct Mailer;
//!
//! #[derive(Clone)]
//! struct App { mailer: Arc<Mailer> }
//!
//! impl FromRef<App> for Arc<Mailer> {
//!     fn from_ref(app: &App) -> Self { app.mailer.clone() }
//! }
//!
//! let app = App { mailer: Arc::new(Mailer) };
//! let State(mailer): State<Arc<Mailer>> = State::from_state(&app);
//! # let _ = mailer;
//! ```

/// Build `Self` from a reference to the executor's state `S`.
#[diagnostic::on_unimplemented(
    message = "the executor's state `{T}` cannot provide `{Self}` to this tool",
    label = "`{Self}` requested from state `{T}`",
    note = "implement `idem::FromRef<{T}> for {Self}` (or make `{T}` itself the state) so the executor can hand this tool its `State<{Self}>`"
)]
pub trait FromRef<T> {
    /// Take (usually clone) the part of `input` that `Self` is.
    fn from_ref(input: &T) -> Self;
}

impl<T: Clone> FromRef<T> for T {
    fn from_ref(input: &T) -> Self {
        input.clone()
    }
}

/// A tool parameter that receives part of the executor's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct State<T>(pub T);

impl<T> State<T> {
    /// Extract `T` from the executor state `s`.
    pub fn from_state<S>(s: &S) -> Self
    where
        T: FromRef<S>,
    {
        State(T::from_ref(s))
    }
}

impl<T> std::ops::Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
