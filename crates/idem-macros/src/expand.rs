//! Code generation for a validated tool.
//!
//! `fn send_email(…)` becomes, in this order:
//!
//! 1. `struct send_email;` — the tool value, carrying the doc comment;
//! 2. `impl send_email { fn run(…) }` — the user's function, unchanged but
//!    for its name, so a reviewer sees the body as written (and calling the
//!    side effect around idem is not the easy path);
//! 3. `impl ToolDef for send_email` — class, argument and output types,
//!    name, description, options, key derivation and the output's schema;
//! 4. `impl<S> Tool<S> for send_email` — the call (and the reconcile hook),
//!    taking each `State<T>` parameter from the executor's state.
//!
//! Every path is absolute through the facade (`::idem::__private::…`), so
//! the caller's names (`Result`, `Option`, a renamed `idem`) cannot change
//! what the expansion means.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{LitStr, Path};

use crate::ast::{DocPart, Param, Signature, ToolFn};
use crate::attr::{Duration, KeyOpt, Options};
use crate::valid::ValidTool;

/// The tokens for a validated tool.
pub(crate) fn tool(tool: &ValidTool) -> TokenStream {
    let ValidTool {
        function,
        signature,
        class,
        options,
    } = tool;
    let private = private_path(options.krate.as_ref().map(|k| &k.value));
    let p = &private;
    let ident = function.ident;
    let vis = &function.item.vis;
    let cfgs = &function.cfgs;
    let docs = &function.doc_attrs;
    let body_attrs = &function.body_attrs;

    let mut sig = function.item.sig.clone();
    sig.ident = format_ident!("run", span = function.ident.span());
    let block = &function.item.block;

    let class_marker = format_ident!("{}", class.marker());
    let args_ty = signature.args_ty;
    let output_ty = signature.output_ty;
    let spec = spec(p, options, function);
    let key_material = key_material(p, options, signature);
    let output_schema = output_schema(p);
    let call = call(p, function, signature);
    let reconcile = options
        .reconcile
        .as_ref()
        .map(|r| reconcile(p, signature, &r.value));
    let state_bounds = signature
        .state_types()
        .map(|ty| quote!(#ty: #p::FromRef<__S>,));

    quote! {
        #(#cfgs)*
        #(#docs)*
        #[allow(non_camel_case_types)]
        #[derive(
            ::core::clone::Clone,
            ::core::marker::Copy,
            ::core::fmt::Debug,
            ::core::default::Default,
        )]
        #vis struct #ident;

        #(#cfgs)*
        impl #ident {
            #(#body_attrs)*
            #sig #block
        }

        #(#cfgs)*
        impl #p::ToolDef for #ident {
            type Class = #p::#class_marker;
            type Args = #args_ty;
            type Output = #output_ty;
            const SPEC: #p::ToolSpec = #spec;
            #key_material
            #output_schema
        }

        #(#cfgs)*
        impl<__S> #p::Tool<__S> for #ident
        where
            __S: ::core::marker::Send + ::core::marker::Sync + 'static,
            #(#state_bounds)*
        {
            #call
            #reconcile
        }
    }
}

/// `::idem::__private`, or `<crate>::__private` with `crate = …`.
pub(crate) fn private_path(krate: Option<&Path>) -> TokenStream {
    match krate {
        Some(krate) => quote!(#krate::__private),
        None => quote!(::idem::__private),
    }
}

/// The `ToolSpec` constant: `ToolSpec::new(name, description)` plus the
/// options that differ from the defaults.
fn spec(p: &TokenStream, options: &Options, function: &ToolFn) -> TokenStream {
    let name = match &options.name {
        Some(name) => name.value.clone(),
        None => LitStr::new(&function.ident.unraw().to_string(), function.ident.span()),
    };
    let description = match &options.description {
        Some(description) => description.value.to_token_stream(),
        None => description_from_docs(&function.docs),
    };
    let mut fields = Vec::new();
    if let Some(key) = &options.key {
        let key = match &key.value {
            KeyOpt::Default => quote!(#p::KeySpec::Default),
            KeyOpt::Natural { fields, window } => {
                let names = fields.iter().map(|f| f.ident.unraw().to_string());
                let window = option(window.as_ref().map(|w| duration(&w.value)));
                quote!(#p::KeySpec::Natural { fields: &[#(#names),*], window: #window })
            }
            KeyOpt::Custom(_) => quote!(#p::KeySpec::Custom),
        };
        fields.push(quote!(key: #key));
    }
    if let Some(version) = &options.key_version {
        let version = Literal::u32_unsuffixed(version.value);
        fields.push(quote!(key_version: #version));
    }
    if let Some(ttl) = &options.ttl {
        let ttl = option(Some(duration(&ttl.value)));
        fields.push(quote!(ttl: #ttl));
    }
    if let Some(timeout) = &options.timeout {
        let timeout = option(Some(duration(&timeout.value)));
        fields.push(quote!(timeout: #timeout));
    }
    if let Some(max) = &options.max_attempts {
        let max = option(Some(Literal::u32_unsuffixed(max.value).into_token_stream()));
        fields.push(quote!(max_attempts: #max));
    }
    if options.reconcile.is_some() {
        fields.push(quote!(has_reconcile: true));
    }
    if let Some(store) = &options.store_args {
        let store = store.value;
        fields.push(quote!(store_args: #store));
    }
    let new = quote!(#p::ToolSpec::new(#name, #description));
    if fields.is_empty() {
        new
    } else {
        quote!(#p::ToolSpec { #(#fields,)* ..#new })
    }
}

/// The description: doc lines without rustdoc's leading space, joined with
/// newlines and trimmed. Non-literal doc values (`include_str!`) are kept
/// as expressions and joined with `concat!`.
fn description_from_docs(docs: &[DocPart]) -> TokenStream {
    if docs.iter().all(|d| matches!(d, DocPart::Text(_))) {
        let lines: Vec<&str> = docs
            .iter()
            .map(|d| match d {
                DocPart::Text(text) => text.strip_prefix(' ').unwrap_or(text).trim_end(),
                DocPart::Expr(_) => unreachable!(),
            })
            .collect();
        let text = lines.join("\n");
        return LitStr::new(text.trim(), Span::call_site()).to_token_stream();
    }
    let parts = docs.iter().map(|d| match d {
        DocPart::Text(text) => {
            let text = text.strip_prefix(' ').unwrap_or(text).trim_end();
            quote!(#text)
        }
        DocPart::Expr(expr) => quote!(#expr),
    });
    quote!(::core::concat!(#(#parts),*))
}

fn duration(d: &Duration) -> TokenStream {
    if d.millis.is_multiple_of(1_000) {
        let secs = Literal::u64_unsuffixed(d.millis / 1_000);
        quote!(::core::time::Duration::from_secs(#secs))
    } else {
        let millis = Literal::u64_unsuffixed(d.millis);
        quote!(::core::time::Duration::from_millis(#millis))
    }
}

fn option(value: Option<TokenStream>) -> TokenStream {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}

/// `ToolDef::key_material` for natural and custom keys.
fn key_material(p: &TokenStream, options: &Options, signature: &Signature) -> Option<TokenStream> {
    let args_ty = signature.args_ty;
    let body = match &options.key.as_ref()?.value {
        KeyOpt::Default => return None,
        KeyOpt::Natural { fields, .. } => {
            let entries = fields.iter().map(|field| {
                let name = field.ident.unraw().to_string();
                let ident = &field.ident;
                // The field access carries the user's span: a field that does
                // not exist is reported at the name in the attribute.
                let value = match &field.normalize {
                    Some(normalize) => {
                        quote_spanned!(normalize.span()=> &#normalize(&__args.#ident))
                    }
                    None => quote!(&__args.#ident),
                };
                quote!((#name, #p::key_field(#value)))
            });
            quote!(#p::natural_key([#(#entries),*]))
        }
        KeyOpt::Custom(function) => {
            quote_spanned!(function.span()=> #p::custom_key(#function(__args)))
        }
    };
    Some(quote! {
        fn key_material(__args: &#args_ty) -> ::core::option::Option<#p::KeyMaterial> {
            #body
        }
    })
}

/// `ToolDef::output_schema`: the output type's JSON Schema if it has one,
/// found by method resolution (see `OutputSchemaProbe` in the runtime), so
/// an output type without `JsonSchema` is no error, just no schema.
fn output_schema(p: &TokenStream) -> TokenStream {
    quote! {
        fn output_schema() -> ::core::option::Option<#p::schemars::Schema> {
            use #p::{WithOutputSchema as _, WithoutOutputSchema as _};
            (&#p::OutputSchemaProbe::<<Self as #p::ToolDef>::Output>::NEW).output_schema()
        }
    }
}

/// `Tool::call`: run the body as a future; a plain `fn` runs when the
/// future is first polled, like an `async fn`.
fn call(p: &TokenStream, function: &ToolFn, signature: &Signature) -> TokenStream {
    // The tool arguments, the context and each `State<T>`, in the order the
    // function declares them.
    let args = signature.params.iter().map(|param| match param {
        Param::Args => quote!(__args),
        Param::Ctx => quote!(__ctx),
        Param::State(_) => quote!(#p::State::from_state(__state)),
    });
    let args_ty = signature.args_ty;
    let output_ty = signature.output_ty;
    let ret = &function.item.sig.output;
    let run = if function.is_async() {
        quote!(Self::run(#(#args),*).await)
    } else {
        quote!(Self::run(#(#args),*))
    };
    // Spanned at the return type: a body whose error type does not convert
    // into `ToolError`, or whose future is not `Send`, is reported there.
    let span = match ret {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => ret.span(),
    };
    let body = respan(quote!(#p::into_tool_result(#run)), span);
    let body = quote!(async move { #body });
    quote! {
        fn call(
            &self,
            __args: #args_ty,
            __ctx: &#p::ToolCtx,
            __state: &__S,
        ) -> impl ::core::future::Future<
            Output = ::core::result::Result<#output_ty, #p::ToolError>,
        > + ::core::marker::Send {
            #body
        }
    }
}

/// `Tool::reconcile`: call the hook with `&args`, the context and the same
/// `State<T>` parameters as the tool, in the tool's order.
fn reconcile(p: &TokenStream, signature: &Signature, hook: &Path) -> TokenStream {
    let args_ty = signature.args_ty;
    let output_ty = signature.output_ty;
    let states = signature
        .state_types()
        .map(|_| quote!(#p::State::from_state(__state)));
    let body = quote_spanned! {hook.span()=> #hook(__args, __ctx, #(#states),*) };
    quote! {
        fn reconcile(
            &self,
            __args: &#args_ty,
            __ctx: &#p::ToolCtx,
            __state: &__S,
        ) -> impl ::core::future::Future<
            Output = ::core::result::Result<#p::Reconciled<#output_ty>, #p::ToolError>,
        > + ::core::marker::Send {
            #body
        }
    }
}

/// `tokens` with every span set to `span`, so that an error about them is
/// reported at the user's token instead of at the attribute.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(group) = &tt {
                let mut respanned =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                tt = respanned.into();
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
