//! The interceptor forwards every method of [`Store`](crate::store::Store):
//! a method added to the trait without a forward here fails this test.

use std::collections::BTreeSet;

use super::OpKind;

/// The names of the `fn` items of the trait or impl that `pick` selects
/// in the Rust source `source`.
fn methods(source: &str, pick: impl Fn(&syn::Item) -> Option<Vec<String>>) -> BTreeSet<String> {
    let file = syn::parse_file(source).expect("the source parses");
    let found: Vec<Vec<String>> = file.items.iter().filter_map(pick).collect();
    assert_eq!(found.len(), 1, "exactly one item matches");
    found.into_iter().flatten().collect()
}

fn trait_methods(item: &syn::Item, name: &str) -> Option<Vec<String>> {
    let syn::Item::Trait(t) = item else {
        return None;
    };
    (t.ident == name).then(|| {
        t.items
            .iter()
            .filter_map(|i| match i {
                syn::TraitItem::Fn(f) => Some(f.sig.ident.to_string()),
                _ => None,
            })
            .collect()
    })
}

/// The methods of `impl … Store for <type whose last path segment is
/// `self_ty`>`.
fn impl_methods(item: &syn::Item, self_ty: &str) -> Option<Vec<String>> {
    let syn::Item::Impl(i) = item else {
        return None;
    };
    let (path, _) = i.trait_.as_ref()?;
    if path.segments.last()?.ident != "Store" {
        return None;
    }
    let syn::Type::Path(ty) = &*i.self_ty else {
        return None;
    };
    if ty.path.segments.last()?.ident != self_ty {
        return None;
    }
    Some(
        i.items
            .iter()
            .filter_map(|i| match i {
                syn::ImplItem::Fn(f) => Some(f.sig.ident.to_string()),
                _ => None,
            })
            .collect(),
    )
}

const STORE_RS: &str = include_str!("../mod.rs");
const INTERCEPT_RS: &str = include_str!("mod.rs");

#[test]
fn the_interceptor_forwards_every_method_of_the_store_trait() {
    let declared = methods(STORE_RS, |i| trait_methods(i, "Store"));
    assert!(declared.contains("fast_path") && declared.contains("wait"));
    let forwarded = methods(INTERCEPT_RS, |i| impl_methods(i, "Interceptor"));
    assert_eq!(
        forwarded, declared,
        "`impl Store for Interceptor` must forward every method of `Store`"
    );
}

#[test]
fn arc_forwards_every_method_of_the_store_trait() {
    let declared = methods(STORE_RS, |i| trait_methods(i, "Store"));
    let forwarded = methods(STORE_RS, |i| impl_methods(i, "Arc"));
    assert_eq!(
        forwarded, declared,
        "`impl Store for Arc<S>` must forward every method of `Store`"
    );
}

#[test]
fn every_asynchronous_method_is_an_operation_a_hook_sees() {
    let mut declared = methods(STORE_RS, |i| trait_methods(i, "Store"));
    // The synchronous methods: `describe` goes to `Hook::describe`;
    // `fast_path` is the interceptor itself, whose `claim_local` goes to
    // `Hook::around_local` and whose `complete_local` declines, so every
    // completion reaches `Hook::around` as `complete`.
    assert!(declared.remove("describe") && declared.remove("fast_path"));
    let kinds: BTreeSet<String> = OpKind::ALL.iter().map(|k| k.name().to_owned()).collect();
    assert_eq!(kinds, declared);
}
