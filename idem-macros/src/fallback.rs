//! What `#[tool]` emits when its input is invalid: the errors, plus the
//! function exactly as written, so the rest of the crate still type-checks
//! (and an IDE keeps working) while the attribute is being fixed.

use proc_macro2::TokenStream;
use quote::quote;

pub(crate) fn tool(original: TokenStream, errors: syn::Error) -> TokenStream {
    let errors = errors.into_compile_error();
    quote! {
        #errors
        // The function is not usable as a tool until the errors above are
        // fixed; do not add a "never used" warning to them.
        #[allow(dead_code)]
        #original
    }
}
