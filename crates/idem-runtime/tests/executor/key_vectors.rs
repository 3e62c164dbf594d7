//! Every test vector written in `docs/keys.md` is checked here, so the
//! document and the code cannot drift apart.

use idem_runtime::key::{
    derive_key, CanonicalArgs, IdempotencyKey, KeyInput, KeySource, Namespace,
};
use serde_json::Value;

#[derive(serde::Deserialize)]
struct Vector {
    name: String,
    version: u32,
    namespace: String,
    tool: String,
    source: String,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    step: Option<u64>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    canonical: Option<String>,
    #[serde(default)]
    fingerprint: Option<String>,
    #[serde(default)]
    fields: Option<Value>,
    #[serde(default)]
    window: Option<u64>,
    #[serde(default)]
    window_seconds: Option<u64>,
    #[serde(default)]
    repeat: Option<u32>,
    #[serde(default)]
    material: Option<String>,
    #[serde(default)]
    sub_key_of: Option<String>,
    #[serde(default)]
    label: Option<String>,
    key: String,
}

fn vectors() -> Vec<Vector> {
    let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/keys.md"));
    let start = doc.find("```json\n").expect("a ```json block of vectors") + 8;
    let end = start + doc[start..].find("```").expect("end of the block");
    serde_json::from_str(&doc[start..end]).expect("vectors parse")
}

#[test]
fn every_documented_vector_reproduces() {
    let vectors = vectors();
    assert!(
        vectors.len() >= 8,
        "the document promises at least 8 vectors"
    );
    for v in vectors {
        let key = if let Some(parent) = &v.sub_key_of {
            IdempotencyKey::parse(parent)
                .unwrap()
                .sub(v.label.as_deref().unwrap())
        } else {
            let ns = Namespace::new(v.namespace.clone()).unwrap();
            let args;
            let canonical = || {
                let parsed: Value = serde_json::from_str(v.arguments.as_deref().unwrap()).unwrap();
                let args = CanonicalArgs::from_value(&parsed).unwrap();
                assert_eq!(
                    Some(&args.text),
                    v.canonical.as_ref(),
                    "{}: canonical form",
                    v.name
                );
                assert_eq!(
                    Some(args.fingerprint.as_str()),
                    v.fingerprint.as_deref(),
                    "{}: fingerprint",
                    v.name
                );
                args
            };
            let source = match v.source.as_str() {
                "call" => KeySource::CallId(v.call_id.as_deref().unwrap()),
                "window" => {
                    args = canonical();
                    KeySource::Window {
                        seconds: v.window_seconds.unwrap(),
                        number: v.window.unwrap(),
                        repeat: v.repeat.unwrap(),
                        args: &args,
                    }
                }
                "step" => {
                    args = canonical();
                    KeySource::Step {
                        run_id: v.run_id.as_deref().unwrap(),
                        step: v.step.unwrap(),
                        args: &args,
                    }
                }
                "natural" => KeySource::Natural {
                    fields: v.fields.as_ref().unwrap(),
                    window: v.window,
                },
                "custom" => KeySource::Custom(v.material.as_deref().unwrap()),
                other => panic!("unknown source {other}"),
            };
            derive_key(&KeyInput {
                version: v.version,
                namespace: &ns,
                tool: &v.tool,
                source,
            })
            .unwrap()
        };
        assert_eq!(key.as_str(), v.key, "vector `{}`", v.name);
    }
}

#[test]
fn spelling_and_order_do_not_change_a_step_key() {
    let ns = Namespace::default();
    let key = |text: &str| {
        let args = CanonicalArgs::from_value(&serde_json::from_str(text).unwrap()).unwrap();
        derive_key(&KeyInput {
            version: 1,
            namespace: &ns,
            tool: "charge_card",
            source: KeySource::Step {
                run_id: "run-1",
                step: 3,
                args: &args,
            },
        })
        .unwrap()
    };
    let a = key(r#"{"amount": 10, "currency": "EUR"}"#);
    assert_eq!(a, key(r#"{"currency":"EUR","amount":10.0}"#));
    assert_eq!(a, key("{ \"amount\" : 1e1 ,\n \"currency\" : \"EUR\" }"));
    assert_ne!(a, key(r#"{"amount": 11, "currency": "EUR"}"#));
}

#[test]
fn every_input_part_changes_the_key() {
    let args = CanonicalArgs::from_value(&serde_json::json!({"to": "a@example.com"})).unwrap();
    let ns = Namespace::default();
    let other_ns = Namespace::new("tenant-b").unwrap();
    let base = KeyInput {
        version: 1,
        namespace: &ns,
        tool: "send_email",
        source: KeySource::Step {
            run_id: "run-1",
            step: 1,
            args: &args,
        },
    };
    let k = derive_key(&base).unwrap();
    let variants = [
        KeyInput {
            version: 2,
            ..base.clone()
        },
        KeyInput {
            namespace: &other_ns,
            ..base.clone()
        },
        KeyInput {
            tool: "send_sms",
            ..base.clone()
        },
        KeyInput {
            source: KeySource::Step {
                run_id: "run-2",
                step: 1,
                args: &args,
            },
            ..base.clone()
        },
        KeyInput {
            source: KeySource::Step {
                run_id: "run-1",
                step: 2,
                args: &args,
            },
            ..base.clone()
        },
    ];
    for v in variants {
        assert_ne!(derive_key(&v).unwrap(), k, "{v:?}");
    }
    let other_args =
        CanonicalArgs::from_value(&serde_json::json!({"to": "b@example.com"})).unwrap();
    let v = KeyInput {
        source: KeySource::Step {
            run_id: "run-1",
            step: 1,
            args: &other_args,
        },
        ..base.clone()
    };
    assert_ne!(derive_key(&v).unwrap(), k);
}

#[test]
fn bad_key_parts_are_typed_errors() {
    use idem_runtime::KeyError;
    let ns = Namespace::default();
    let input = |source| KeyInput {
        version: 1,
        namespace: &ns,
        tool: "t",
        source,
    };
    assert_eq!(
        derive_key(&input(KeySource::CallId(""))).unwrap_err(),
        KeyError::Empty { what: "call id" }
    );
    let long = "x".repeat(257);
    assert_eq!(
        derive_key(&input(KeySource::CallId(&long))).unwrap_err(),
        KeyError::TooLong {
            what: "call id",
            len: 257,
            max: 256
        }
    );
    assert!(matches!(
        derive_key(&input(KeySource::Custom(""))).unwrap_err(),
        KeyError::Empty { what: "custom key" }
    ));
    assert!(Namespace::new("").is_err());
    assert!(matches!(
        CanonicalArgs::from_value(&serde_json::json!([1, 2])).unwrap_err(),
        KeyError::ArgumentsNotObject { found: "an array" }
    ));
    assert!(IdempotencyKey::parse("not-a-key").is_err());
    let msg = derive_key(&input(KeySource::CallId("")))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("call id is empty"), "{msg}");
}
