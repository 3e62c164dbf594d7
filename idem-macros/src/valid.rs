//! Cross-checks between the options, the class and the function. Each rule
//! of the class table that can be decided from the attribute alone is
//! decided here, with the error on the option the user wrote.

use proc_macro2::Span;

use crate::ast::{DocPart, ToolFn};
use crate::attr::{Attrs, Class};
use crate::ctxt::Ctxt;
use crate::suggest::{a_tool, one_of};

/// Check `attrs` against each other and against `tool`; return the class
/// if it is known.
pub(crate) fn check(cx: &mut Ctxt, attrs: &Attrs, tool: &ToolFn) -> Option<Class> {
    check_description(cx, attrs, tool);
    let Some(class) = &attrs.class else {
        if attrs.written.iter().any(|o| o == "class") {
            // Written but invalid: already reported where it was written.
            return None;
        }
        cx.error_at(
            Span::call_site(),
            format!(
                "missing `class`: every tool says what repeating it does, for example `#[tool(class = \"idempotent_write\")]`; the classes are {}",
                one_of(Class::NAMES)
            ),
        );
        return None;
    };
    let class = class.value;

    if !class.is_keyed() {
        let keyed_options = [
            attrs.key.as_ref().map(|o| &o.name),
            attrs.ttl.as_ref().map(|o| &o.name),
            attrs.key_version.as_ref().map(|o| &o.name),
        ];
        for name in keyed_options.into_iter().flatten() {
            cx.error_spanned_by(
                name,
                format!("`{name}` is not allowed on a `read` tool: reads have no idempotency key and are never stored; remove it, or declare the write class the tool really has"),
            );
        }
        if let Some(reconcile) = &attrs.reconcile {
            cx.error_spanned_by(
                &reconcile.name,
                "`reconcile` is not allowed on a `read` tool: a read has no effect to look for, it is simply run again",
            );
        }
    }

    if class == Class::IdempotentWrite {
        if let Some(reconcile) = &attrs.reconcile {
            cx.error_spanned_by(
                &reconcile.name,
                "`reconcile` is not allowed on an `idempotent_write` tool: when its owner vanishes it is simply run again with the same key, so the hook would never be called; reconcile hooks are for `non_idempotent_write` and `irreversible` tools",
            );
        }
    }

    if !class.is_retry_safe() {
        if let Some(max) = &attrs.max_attempts {
            cx.error_spanned_by(
                &max.name,
                format!(
                    "`max_attempts` is not allowed on {}: it is never retried, because repeating the call repeats its effect; only `read` and `idempotent_write` tools are retried",
                    a_tool(class.name())
                ),
            );
        }
    }
    Some(class)
}

/// A tool without a description cannot be chosen well by the model.
fn check_description(cx: &mut Ctxt, attrs: &Attrs, tool: &ToolFn) {
    if attrs.description.is_some() {
        return;
    }
    let documented = tool.docs.iter().any(|part| match part {
        DocPart::Text(text) => !text.trim().is_empty(),
        DocPart::Expr(_) => true,
    });
    if !documented {
        cx.error_spanned_by(
            tool.ident,
            format!(
                "tool `{}` has no description: the model reads it to decide when to call the tool; add a doc comment (`/// Send an email to a customer.`) or `description = \"…\"`",
                tool.ident
            ),
        );
    }
}
