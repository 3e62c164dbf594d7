//! A typed model of the function under `#[tool]`, in two parts:
//!
//! - [`ToolFn`]: its name, documentation and attributes, which every
//!   function has;
//! - [`Signature`]: what its parameters and return type mean to the
//!   executor, which only a function with a tool's signature has.
//!
//! Everything here is read off the syntax. Signature errors (a generic tool,
//! a `self` receiver, a return type that is not a `Result`) are recorded in
//! the [`Ctxt`] and leave no [`Signature`]; every such error is still found
//! and the attribute's own errors are reported in the same build.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{
    Attribute, Expr, FnArg, GenericArgument, Ident, ItemFn, Lit, Meta, PathArguments, ReturnType,
    Type,
};

use crate::ctxt::Ctxt;

/// The function, split into what the expansion needs.
pub(crate) struct ToolFn<'a> {
    pub(crate) item: &'a ItemFn,
    /// The function's name; the generated unit struct takes it.
    pub(crate) ident: &'a Ident,
    /// `/// …` lines (and `#[doc = …]` values), in order.
    pub(crate) docs: Vec<DocPart>,
    /// The doc attributes themselves: they move to the generated struct.
    pub(crate) doc_attrs: Vec<&'a Attribute>,
    /// `#[cfg(…)]` attributes: repeated on every generated item.
    pub(crate) cfgs: Vec<&'a Attribute>,
    /// Every other attribute: stays on the function body.
    pub(crate) body_attrs: Vec<&'a Attribute>,
}

/// A tool's signature: the arguments first, then context and state
/// parameters, returning a `Result`.
pub(crate) struct Signature<'a> {
    /// The parameters, in order, with the role each plays.
    pub(crate) params: Vec<Param<'a>>,
    /// The arguments type (the first parameter's type).
    pub(crate) args_ty: &'a Type,
    /// `T` of `Result<T, E>`.
    pub(crate) output_ty: &'a Type,
}

/// One line of documentation.
pub(crate) enum DocPart {
    /// `/// text` or `#[doc = "text"]`.
    Text(String),
    /// `#[doc = include_str!("…")]` and the like.
    Expr(Expr),
}

/// What a parameter of the tool function receives.
pub(crate) enum Param<'a> {
    /// The arguments, deserialized from the model's JSON (always first).
    Args,
    /// `ctx: &ToolCtx`.
    Ctx,
    /// `State<T>`: `T` is taken from the executor's state.
    State(&'a Type),
}

impl<'a> ToolFn<'a> {
    pub(crate) fn from_item(item: &'a ItemFn) -> Self {
        let mut docs = Vec::new();
        let mut doc_attrs = Vec::new();
        let mut cfgs = Vec::new();
        let mut body_attrs = Vec::new();
        for attr in &item.attrs {
            if attr.path().is_ident("doc") {
                match &attr.meta {
                    Meta::NameValue(nv) => {
                        doc_attrs.push(attr);
                        docs.push(match &nv.value {
                            Expr::Lit(lit) => match &lit.lit {
                                Lit::Str(s) => DocPart::Text(s.value()),
                                _ => DocPart::Expr(nv.value.clone()),
                            },
                            other => DocPart::Expr(other.clone()),
                        });
                    }
                    // `#[doc(hidden)]` and friends are about the item, not
                    // its description.
                    _ => body_attrs.push(attr),
                }
            } else if attr.path().is_ident("cfg") {
                cfgs.push(attr);
            } else {
                body_attrs.push(attr);
            }
        }
        ToolFn {
            item,
            ident: &item.sig.ident,
            docs,
            doc_attrs,
            cfgs,
            body_attrs,
        }
    }

    pub(crate) fn is_async(&self) -> bool {
        self.item.sig.asyncness.is_some()
    }
}

impl<'a> Signature<'a> {
    /// The signature of `item` as a tool, or `None` if it is not one; each
    /// reason is recorded in `cx`.
    pub(crate) fn from_item(cx: &mut Ctxt, item: &'a ItemFn) -> Option<Self> {
        let errors_before = cx.error_count();
        let sig = &item.sig;
        check_signature(cx, item);

        let mut params = Vec::new();
        let mut args_ty = None;
        for (i, input) in sig.inputs.iter().enumerate() {
            let ty = match input {
                FnArg::Receiver(receiver) => {
                    cx.error_spanned_by(
                        receiver,
                        "a tool is a free function: `#[tool]` cannot be used on a method that takes `self`",
                    );
                    continue;
                }
                FnArg::Typed(pat_type) => &*pat_type.ty,
            };
            if i == 0 {
                if is_ctx(ty) || state_inner(ty).is_some() {
                    cx.error_spanned_by(
                        ty,
                        "the first parameter of a tool is its arguments (a struct deriving `Deserialize`, `Serialize` and `JsonSchema`); put `ctx` and `State` parameters after it",
                    );
                }
                args_ty = Some(ty);
                params.push(Param::Args);
            } else if is_ctx(ty) {
                if params.iter().any(|p| matches!(p, Param::Ctx)) {
                    cx.error_spanned_by(ty, "a tool takes at most one `&ToolCtx` parameter");
                }
                params.push(Param::Ctx);
            } else if let Some(inner) = state_inner(ty) {
                params.push(Param::State(inner));
            } else {
                cx.error_spanned_by(
                    ty,
                    "after its arguments a tool takes only `ctx: &ToolCtx` and `State<T>` parameters; move other inputs into the arguments struct or the executor's state",
                );
            }
        }
        if sig.inputs.is_empty() {
            cx.error_spanned_by(
                &sig.ident,
                "a tool takes its arguments as its first parameter; a tool without arguments takes an empty struct deriving `Deserialize`, `Serialize` and `JsonSchema`",
            );
        }
        let output_ty = result_ok_type(cx, &sig.output, &sig.ident);

        if cx.error_count() > errors_before {
            return None;
        }
        Some(Signature {
            params,
            args_ty: args_ty?,
            output_ty: output_ty?,
        })
    }

    /// The types of the `State<T>` parameters, in order.
    pub(crate) fn state_types(&self) -> impl Iterator<Item = &'a Type> + '_ {
        self.params.iter().filter_map(|p| match p {
            Param::State(ty) => Some(*ty),
            _ => None,
        })
    }
}

/// Reject what a tool function cannot be.
fn check_signature(cx: &mut Ctxt, item: &ItemFn) {
    let sig = &item.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        cx.error_spanned_by(
            &sig.generics,
            "a tool cannot be generic: the model calls it with JSON, so its argument and output types must be concrete (and its JSON Schema fixed)",
        );
    }
    if let Some(constness) = &sig.constness {
        cx.error_spanned_by(
            constness,
            "a tool cannot be a `const fn`: it performs effects",
        );
    }
    if let syn::Safety::Unsafe(unsafety) = &sig.safety {
        cx.error_spanned_by(
            unsafety,
            "a tool cannot be an `unsafe fn`: the executor calls it from model output",
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(abi, "a tool cannot have an `extern` ABI");
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a tool cannot be variadic");
    }
    for input in &sig.inputs {
        if let FnArg::Typed(pat_type) = input {
            if contains_impl_trait(&pat_type.ty) {
                cx.error_spanned_by(
                    &pat_type.ty,
                    "a tool cannot take `impl Trait` parameters: they make it generic",
                );
            }
        }
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream()
        .into_iter()
        .any(|tt| matches!(&tt, proc_macro2::TokenTree::Ident(i) if i == "impl"))
}

/// `&ToolCtx` (any path ending in `ToolCtx`).
fn is_ctx(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => r.mutability.is_none() && last_segment_is(&r.elem, "ToolCtx"),
        _ => false,
    }
}

/// `T` of `State<T>` (any path ending in `State`).
fn state_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "State" {
        return None;
    }
    match &last.arguments {
        PathArguments::AngleBracketed(args) if args.args.len() == 1 => match &args.args[0] {
            GenericArgument::Type(inner) => Some(inner),
            _ => None,
        },
        _ => None,
    }
}

fn last_segment_is(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Path(path) => path.path.segments.last().is_some_and(|s| s.ident == name),
        Type::Group(group) => last_segment_is(&group.elem, name),
        _ => false,
    }
}

/// `T` of a `-> Result<T, E>` (or `-> some::Result<T>`) return type.
fn result_ok_type<'a>(cx: &mut Ctxt, output: &'a ReturnType, ident: &Ident) -> Option<&'a Type> {
    const HELP: &str =
        "the executor records `Ok` outputs and reads `Err(ToolError)` to decide about retries";
    let ty = match output {
        ReturnType::Type(_, ty) => &**ty,
        ReturnType::Default => {
            cx.error_spanned_by(
                ident,
                format!("a tool returns `Result<Output, ToolError>`: add a return type; {HELP}"),
            );
            return None;
        }
    };
    let found = match ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last().and_then(|last| {
            if last.ident != "Result" {
                return None;
            }
            match &last.arguments {
                PathArguments::AngleBracketed(args) => match args.args.first() {
                    Some(GenericArgument::Type(ok)) => Some(ok),
                    _ => None,
                },
                _ => None,
            }
        }),
        _ => None,
    };
    if found.is_none() {
        cx.error_spanned_by(
            ty,
            format!(
                "a tool returns `Result<Output, ToolError>`, not `{}`; {HELP}",
                compact(ty.to_token_stream())
            ),
        );
    }
    found
}

/// Tokens as source text without the spaces `to_string` puts everywhere.
fn compact(tokens: TokenStream) -> String {
    let text = tokens.to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let drop_space = c == ' '
            && (matches!(next, Some('<' | '>' | ',' | ')' | ':'))
                || matches!(out.chars().last(), Some('<' | '(' | ':' | '&')));
        if !drop_space {
            out.push(c);
        }
    }
    out
}
