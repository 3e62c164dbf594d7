//! What `#[tool]` emits when its input has errors: every error, and as much
//! of the tool as was understood, so that one mistake gives one error.
//!
//! - When only options are wrong (an unknown or repeated option, a bad
//!   value, an option the class does not allow, a missing description) the
//!   tool is generated as usual from the [`ValidTool`] that validation
//!   built, each bad option left at its default, and the errors come with
//!   it ([`tool`]). `tools![…]` and `executor.call(…)` then still find the
//!   tool, and report nothing of their own.
//! - When there is no sound tool to generate ([`function`]): the function
//!   is not a tool's signature (not a `fn`, no arguments, not returning a
//!   `Result`, generic, an unexpected parameter…), the class is missing,
//!   unknown or given twice differently, or the attribute or its `crate`
//!   path cannot be read. The function is emitted exactly as written, so
//!   its body still type-checks (and an IDE keeps working) while the
//!   attribute is being fixed. A class is never guessed, and no tool
//!   struct is emitted without one: the class is what allows or forbids
//!   repeating a write.
//!
//! Either way the crate does not compile until every error is fixed, so
//! nothing generated here ever runs.
//!
//! [`ValidTool`]: crate::valid::ValidTool

use proc_macro2::TokenStream;
use quote::quote;

/// The errors, then the tool as generated from what was understood.
pub(crate) fn tool(expanded: TokenStream, errors: syn::Error) -> TokenStream {
    let errors = errors.into_compile_error();
    quote! {
        #errors
        #expanded
    }
}

/// The errors, then the function as written.
pub(crate) fn function(original: TokenStream, errors: syn::Error) -> TokenStream {
    let errors = errors.into_compile_error();
    quote! {
        #errors
        // The function is not usable as a tool until the errors above are
        // fixed; do not add a "never used" warning to them.
        #[allow(dead_code)]
        #original
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    /// `#[tool(args)]` on a documented `send_email` with arguments: how many
    /// errors, and whether the tool struct was generated (and with what).
    fn expand(args: proc_macro2::TokenStream) -> (usize, Option<String>) {
        let item = quote! {
            /// Send an email.
            async fn send_email(args: SendEmail) -> Result<(), ToolError> { Ok(()) }
        };
        let tokens = crate::expand_tool(args, item).to_string();
        let errors = tokens.matches("compile_error").count();
        let generated = tokens.contains("struct send_email").then_some(tokens);
        (errors, generated)
    }

    #[test]
    fn a_bad_option_is_one_error_and_the_tool_is_still_generated() {
        for args in [
            quote!(class = "idempotent_write", timout = "5s"),
            quote!(class = "idempotent_write", timeout = "5 seconds"),
            quote!(class = "idempotent_write", ttl = "1d", ttl = "7d"),
            quote!(class = "idempotent_write", key = natural(fields())),
            quote!(class = "idempotent_write", name = "not a name"),
            quote!(class = "idempotent_write", description = ""),
            quote!(class = "read", ttl = "7d"),
            quote!(class = "read", reconcile = find_it),
            quote!(class = "non_idempotent_write", max_attempts = 3),
            quote!(idempotent_write),
            quote!(class = idempotent_write),
            quote!(class = "read", class = "read"),
        ] {
            let (errors, generated) = expand(args.clone());
            assert_eq!(errors, 1, "`{args}`");
            assert!(generated.is_some(), "`{args}`: no tool generated");
        }
    }

    #[test]
    fn an_option_the_class_forbids_is_dropped() {
        let (_, generated) = expand(quote!(class = "read", ttl = "7d", max_attempts = 2));
        let generated = generated.expect("the tool is generated");
        assert!(!generated.contains("ttl :"), "{generated}");
        assert!(generated.contains("max_attempts"), "{generated}");
        assert!(generated.contains(":: Read"), "{generated}");
    }

    #[test]
    fn without_a_class_the_user_gave_there_is_no_tool() {
        for args in [
            quote!(timeout = "5s"),
            quote!(class = "idempotant_write"),
            quote!(class = "read", class = "irreversible"),
            quote!(class = "reed", class = "read"),
            quote!(class),
            quote!(class = "read" timeout = "5s"),
            quote!(class = "read", crate = "idem"),
        ] {
            let (errors, generated) = expand(args.clone());
            assert_eq!(errors, 1, "`{args}`");
            assert!(generated.is_none(), "`{args}`: a tool was generated");
        }
    }
}
