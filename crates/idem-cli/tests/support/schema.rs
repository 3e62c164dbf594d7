//! The JSON schema as `docs/cli.md` documents it, read from the document
//! itself (each table after a `<!-- schema: NAME -->` line), and a check
//! that real output has exactly the documented fields with the documented
//! types — so the document and the program cannot drift apart.

use std::collections::BTreeMap;

use serde_json::Value;

/// `docs/cli.md`, then `docs/inbox.md` (whose API answers use its types).
const DOCS: [&str; 2] = [
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md")),
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/inbox.md")),
];

/// The documented statuses.
pub const STATUSES: [&str; 6] = [
    "in_flight",
    "awaiting_approval",
    "approved",
    "succeeded",
    "failed",
    "unknown",
];

/// Object name → its fields, in order, with their types.
pub fn schemas() -> BTreeMap<String, Vec<(String, String)>> {
    let mut schemas = BTreeMap::new();
    let mut lines = DOCS.iter().flat_map(|doc| doc.lines());
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("<!-- schema: ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        let fields: Vec<(String, String)> = lines
            .by_ref()
            .skip(2) // header and separator
            .take_while(|l| l.starts_with('|'))
            .map(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
            })
            .collect();
        assert!(!fields.is_empty(), "schema {name} has no fields");
        schemas.insert(name.to_owned(), fields);
    }
    schemas
}

/// Check that `value` is a `name` object exactly as documented.
pub fn check(value: &Value, name: &str) {
    check_type(value, name, &schemas(), name);
}

fn check_type(
    value: &Value,
    ty: &str,
    schemas: &BTreeMap<String, Vec<(String, String)>>,
    path: &str,
) {
    let ty = match ty.strip_suffix(" or null") {
        Some(_) if value.is_null() => return,
        Some(inner) => inner,
        None => ty,
    };
    let fail = |what: &str| -> ! { panic!("{path}: expected {what}, found {value}") };
    match ty {
        "string" => {
            value.as_str().unwrap_or_else(|| fail("a string"));
        }
        "time" => {
            let text = value.as_str().unwrap_or_else(|| fail("a time"));
            let shape: String = text
                .chars()
                .map(|c| if c.is_ascii_digit() { '0' } else { c })
                .collect();
            assert_eq!(
                shape, "0000-00-00T00:00:00.000Z",
                "{path}: {text} is not RFC 3339 UTC with milliseconds"
            );
        }
        "status" => {
            let text = value.as_str().unwrap_or_else(|| fail("a status"));
            assert!(
                STATUSES.contains(&text),
                "{path}: {text} is not a documented status"
            );
        }
        "integer" => {
            value.as_u64().unwrap_or_else(|| fail("an integer"));
        }
        "boolean" => {
            value.as_bool().unwrap_or_else(|| fail("a boolean"));
        }
        "JSON" => assert!(!value.is_null(), "{path}: null where JSON is documented"),
        _ if ty.starts_with("array of ") => {
            let items = value.as_array().unwrap_or_else(|| fail("an array"));
            for (i, item) in items.iter().enumerate() {
                check_type(
                    item,
                    &ty["array of ".len()..],
                    schemas,
                    &format!("{path}[{i}]"),
                );
            }
        }
        _ if ty.starts_with("object of ") => {
            let map = value.as_object().unwrap_or_else(|| fail("an object"));
            for (k, v) in map {
                check_type(
                    v,
                    &ty["object of ".len()..],
                    schemas,
                    &format!("{path}.{k}"),
                );
            }
        }
        name => {
            let fields = schemas
                .get(name)
                .unwrap_or_else(|| panic!("{path}: type {name} is not documented"));
            let object = value.as_object().unwrap_or_else(|| fail("an object"));
            let documented: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
            let mut found: Vec<&str> = object.keys().map(String::as_str).collect();
            let mut expected = documented.clone();
            found.sort_unstable();
            expected.sort_unstable();
            assert_eq!(
                found, expected,
                "{path}: the fields differ from docs/cli.md"
            );
            for (field, ty) in fields {
                check_type(&object[field], ty, schemas, &format!("{path}.{field}"));
            }
        }
    }
}
