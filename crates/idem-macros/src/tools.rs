//! `tools![a, b, …]`: an explicit registry whose tool names are checked
//! for uniqueness at compile time.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Path, Token};

use crate::expand::private_path;

/// `[crate = path;] tool, tool, …`. The facade's `tools!` passes
/// `crate = $crate;` so a renamed dependency needs no option.
struct ToolsInput {
    krate: Option<Path>,
    tools: Punctuated<Path, Token![,]>,
}

impl Parse for ToolsInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let krate = if input.peek(Token![crate]) && input.peek2(Token![=]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            let krate = input.parse()?;
            input.parse::<Token![;]>()?;
            Some(krate)
        } else {
            None
        };
        let tools = Punctuated::parse_terminated(input)?;
        Ok(ToolsInput { krate, tools })
    }
}

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let input: ToolsInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(e) => return e.into_compile_error(),
    };
    let p = private_path(input.krate.as_ref());
    let tools: Vec<&Path> = input.tools.iter().collect();

    let mut checks = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let text = tool.to_token_stream().to_string().replace(' ', "");
        for earlier in &tools[..i] {
            let earlier_text = earlier.to_token_stream().to_string().replace(' ', "");
            if text == earlier_text {
                let message = format!("`{text}` is listed twice in `tools![…]`");
                checks.push(quote_spanned!(tool.span()=> ::core::compile_error!(#message);));
                continue;
            }
            // Two different tools may still share a name (`name = "…"`
            // overrides): compare the names at compile time, and point the
            // failure at the later of the two.
            let message = format!(
                "`{text}` and `{earlier_text}` have the same tool name; the model calls tools by name, so each tool in `tools![…]` needs its own (rename one with `#[tool(name = \"…\")]`)"
            );
            checks.push(quote_spanned! {tool.span()=>
                const _: () = if #p::str_eq(
                    <#tool as #p::ToolDef>::SPEC.name,
                    <#earlier as #p::ToolDef>::SPEC.name,
                ) {
                    ::core::panic!(#message)
                };
            });
        }
    }
    quote! {{
        #(#checks)*
        #p::Registry::new() #(.with(#tools))*
    }}
}
