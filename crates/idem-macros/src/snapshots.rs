//! Expansion snapshots: every `tests/expand/*.rs` file of the workspace is
//! expanded (each `#[tool(…)]` function replaced by what the attribute
//! generates), pretty-printed with prettyplease and compared with the
//! checked-in `*.expanded.rs` next to it. `IDEM_BLESS=1 cargo test -p
//! idem-macros` rewrites the snapshots after an intended change.
//!
//! Unlike `cargo expand` this needs no nightly toolchain, and unlike
//! rustfmt it gives the same output on every machine.

use std::fs;
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Item, Meta};

/// Expand every `#[tool]` function in `source`.
fn expand_file(source: &str) -> String {
    let mut file: syn::File = syn::parse_str(source).expect("snapshot input parses");
    let mut items = Vec::new();
    for item in std::mem::take(&mut file.items) {
        let Item::Fn(mut function) = item else {
            items.push(item);
            continue;
        };
        let position = function
            .attrs
            .iter()
            .position(|a| a.path().is_ident("tool"));
        let Some(position) = position else {
            items.push(Item::Fn(function));
            continue;
        };
        let attr = function.attrs.remove(position);
        let args = match attr.meta {
            Meta::List(list) => list.tokens,
            _ => proc_macro2::TokenStream::new(),
        };
        let expanded = crate::expand_tool(args, function.into_token_stream());
        let expanded: syn::File = syn::parse2(expanded).expect("the expansion parses");
        items.extend(expanded.items);
    }
    file.items = items;
    // Comments are not tokens; keep the input's leading comment, which says
    // what the snapshot shows.
    let header: String = source
        .lines()
        .take_while(|line| line.starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    let header = if header.is_empty() {
        header
    } else {
        header + "\n"
    };
    format!("{header}{}", prettyplease::unparse(&file))
}

fn inputs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/expand");
    let mut inputs: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "rs")
                && !path.to_string_lossy().ends_with(".expanded.rs")
        })
        .collect();
    inputs.sort();
    inputs
}

#[test]
fn expansions_match_their_snapshots() {
    let bless = std::env::var_os("IDEM_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    let inputs = inputs();
    assert!(!inputs.is_empty(), "no snapshot inputs under tests/expand");
    for input in inputs {
        let source = fs::read_to_string(&input).expect("read snapshot input");
        let actual = expand_file(&source);
        let snapshot = input.with_extension("expanded.rs");
        let expected = fs::read_to_string(&snapshot).unwrap_or_default();
        if actual == expected {
            continue;
        }
        if bless {
            fs::write(&snapshot, &actual).expect("write snapshot");
        } else {
            stale.push(format!(
                "{}: expansion differs from the snapshot\n--- expected\n{expected}\n--- actual\n{actual}",
                snapshot.display()
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "{}\n\nrun `IDEM_BLESS=1 cargo test -p idem-macros` to accept the new expansions",
        stale.join("\n\n")
    );
}
