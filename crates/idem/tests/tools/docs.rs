//! The class rules are written once (`idem-runtime/src/doc/*.md`, included
//! in the crate docs); the README, which cannot include a file, must show
//! them word for word.

#[test]
fn readme_shows_the_class_rules_as_the_crate_docs_do() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    for (file, text) in [
        (
            "classes.md",
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../idem-runtime/src/doc/classes.md"
            )),
        ),
        (
            "failures.md",
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../idem-runtime/src/doc/failures.md"
            )),
        ),
    ] {
        assert!(
            readme.contains(text),
            "README.md differs from idem-runtime/src/doc/{file}; copy the file into the README"
        );
    }
}
