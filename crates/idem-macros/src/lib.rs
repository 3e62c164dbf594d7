//! Procedural macros of [idem](https://docs.rs/idem): [`#[tool]`](macro@tool)
//! and [`tools!`](macro@tools).
//!
//! Depend on the `idem` crate, which re-exports these; generated code refers
//! to `::idem::__private` only.
//!
//! Inside, parse → validate → expand, one file each: `attr` parses the
//! options, `ast` models the function (its attributes, and its signature
//! when it has a tool's), `valid` checks them against each other and builds
//! a `ValidTool` whose every part is understood, and `expand` generates the
//! code from it. Every error is collected in a `ctxt::Ctxt` and reported
//! together.
//!
//! An error does not throw away what was understood. A bad option is
//! reported and left out, and the tool is still generated, so one typo in
//! `#[tool(…)]` is one error, not one more at every `tools![…]` and
//! `executor.call(…)` that names the tool. Only when no sound tool exists
//! (the function is not a tool's signature, or the class is missing or
//! unknown, which is never guessed) does `fallback` emit the function as
//! written instead. `tools` implements `tools![…]`.

mod ast;
mod attr;
mod ctxt;
mod expand;
mod fallback;
mod suggest;
mod tools;
mod valid;

#[cfg(test)]
mod snapshots;

use proc_macro::TokenStream;

#[doc = include_str!("tool.md")]
#[proc_macro_attribute]
pub fn tool(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_tool(args.into(), item.into()).into()
}

/// The implementation of `tools!`, which the `idem` facade wraps so that a
/// renamed dependency works. Use `idem::tools!`.
#[doc(hidden)]
#[proc_macro]
pub fn tools(input: TokenStream) -> TokenStream {
    tools::expand(input.into()).into()
}

/// `#[tool(args)] item` → tokens, outside the `proc_macro` bridge so that
/// unit tests (the expansion snapshots) can run it.
pub(crate) fn expand_tool(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    let function: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let error = syn::Error::new(
                proc_macro2::Span::call_site(),
                "`#[tool]` goes on a function (`fn` or `async fn`): the function becomes the tool",
            );
            return fallback::function(item, error);
        }
    };
    let mut cx = ctxt::Ctxt::new();
    let attrs = attr::parse(&mut cx, args);
    let tool = ast::ToolFn::from_item(&function);
    let signature = ast::Signature::from_item(&mut cx, &function);
    let valid = valid::check(&mut cx, attrs, tool, signature);
    match (valid, cx.check()) {
        (Some(valid), Ok(())) => expand::tool(&valid),
        (Some(valid), Err(errors)) => fallback::tool(expand::tool(&valid), errors),
        (None, Err(errors)) => fallback::function(item, errors),
        (None, Ok(())) => unreachable!("`valid::check` records why there is no tool"),
    }
}
