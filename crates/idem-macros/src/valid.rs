//! Cross-checks between the options, the class and the function, and the
//! decision whether a tool can be generated at all.
//!
//! Each rule of the class table that can be decided from the attribute
//! alone is decided here, with the error on the option the user wrote. An
//! option the class does not allow is reported and dropped: the rest of the
//! tool is sound without it. What cannot be dropped is the signature, the
//! class and the `crate` path; without any of them there is no [`ValidTool`].

use proc_macro2::Span;

use crate::ast::{DocPart, Signature, ToolFn};
use crate::attr::{Attrs, Class, Options};
use crate::ctxt::Ctxt;
use crate::suggest::{a_tool, one_of};

/// Everything the expansion needs, each part understood: a tool signature,
/// a class the user gave, and the options that are valid for that class.
pub(crate) struct ValidTool<'a> {
    pub(crate) function: ToolFn<'a>,
    pub(crate) signature: Signature<'a>,
    pub(crate) class: Class,
    /// The options that were understood and are allowed for `class`; every
    /// other one was reported and is left at its default.
    pub(crate) options: Options,
}

/// Check `attrs` against each other and against the function, recording
/// every error in `cx`. Return the tool to generate, unless there is no
/// sound one: a function that does not have a tool's signature (then
/// `signature` is `None`), a class that is missing, unknown or given twice
/// differently, an unreadable attribute or an unreadable `crate` path.
/// Every `None` comes with an error recorded here or before.
pub(crate) fn check<'a>(
    cx: &mut Ctxt,
    attrs: Attrs,
    function: ToolFn<'a>,
    signature: Option<Signature<'a>>,
) -> Option<ValidTool<'a>> {
    if !attrs.rejected("description") {
        check_description(cx, &attrs.options, &function);
    }
    let class = class(cx, &attrs);
    let Attrs {
        mut options,
        rejected,
        ..
    } = attrs;
    if let Some(class) = class {
        drop_options_not_allowed(cx, class, &mut options);
    }
    // `crate = …` decides every path in the expansion: guessing `::idem`
    // instead would add an error at each of them when the dependency is
    // renamed.
    if rejected.iter().any(|o| o == "crate") {
        return None;
    }
    Some(ValidTool {
        function,
        signature: signature?,
        class: class?,
        options,
    })
}

/// The class, if the user gave exactly one. A class is never guessed: the
/// class decides whether the executor may repeat a write, so a tool is
/// generated only with the class that was written.
fn class(cx: &mut Ctxt, attrs: &Attrs) -> Option<Class> {
    if attrs.unreadable || attrs.rejected("class") {
        // Already reported where it was written.
        return None;
    }
    match &attrs.class {
        Some(class) => Some(class.value),
        None => {
            cx.error_at(
                Span::call_site(),
                format!(
                    "missing `class`: every tool says what repeating it does, for example `#[tool(class = \"idempotent_write\")]`; the classes are {}",
                    one_of(Class::NAMES)
                ),
            );
            None
        }
    }
}

/// Report, and take out of `options`, each option `class` does not allow.
fn drop_options_not_allowed(cx: &mut Ctxt, class: Class, options: &mut Options) {
    if !class.is_keyed() {
        let keyed_options = [
            options.key.take().map(|o| o.name),
            options.ttl.take().map(|o| o.name),
            options.key_version.take().map(|o| o.name),
            options.store_args.take().map(|o| o.name),
        ];
        for name in keyed_options.into_iter().flatten() {
            cx.error_spanned_by(
                &name,
                format!("`{name}` is not allowed on a `read` tool: reads have no idempotency key and are never stored; remove it, or declare the write class the tool really has"),
            );
        }
        if let Some(reconcile) = options.reconcile.take() {
            cx.error_spanned_by(
                &reconcile.name,
                "`reconcile` is not allowed on a `read` tool: a read has no effect to look for, it is simply run again",
            );
        }
    }

    if class == Class::IdempotentWrite {
        if let Some(reconcile) = options.reconcile.take() {
            cx.error_spanned_by(
                &reconcile.name,
                "`reconcile` is not allowed on an `idempotent_write` tool: when its owner vanishes it is simply run again with the same key, so the hook would never be called; reconcile hooks are for `non_idempotent_write` and `irreversible` tools",
            );
        }
    }

    if !class.is_retry_safe() {
        if let Some(max) = options.max_attempts.take() {
            cx.error_spanned_by(
                &max.name,
                format!(
                    "`max_attempts` is not allowed on {}: it is never retried, because repeating the call repeats its effect; only `read` and `idempotent_write` tools are retried",
                    a_tool(class.name())
                ),
            );
        }
    }
}

/// A tool without a description cannot be chosen well by the model. The
/// error does not stop the expansion: the description is then empty.
fn check_description(cx: &mut Ctxt, options: &Options, function: &ToolFn) {
    if options.description.is_some() {
        return;
    }
    let documented = function.docs.iter().any(|part| match part {
        DocPart::Text(text) => !text.trim().is_empty(),
        DocPart::Expr(_) => true,
    });
    if !documented {
        cx.error_spanned_by(
            function.ident,
            format!(
                "tool `{}` has no description: the model reads it to decide when to call the tool; add a doc comment (`/// Send an email to a customer.`) or `description = \"…\"`",
                function.ident
            ),
        );
    }
}
