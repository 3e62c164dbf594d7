//! idem tools served over MCP, as rmcp's own client lists them: each tool
//! as the registry exports it, with idem's `_meta`, and `get_tool` for
//! registered tools only.

use crate::mcp_support::{connect, registry, server, Ledger};
use idem::mcp::{CLASS_META, KEYING_META, REPEAT_ARGUMENT};
use rmcp::ServerHandler;
use serde_json::{json, Value};

#[tokio::test]
async fn tools_list_shows_each_tool_as_the_registry_exports_it() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let tools = client.list_all_tools().await.unwrap();

    // Name, input schema, annotations from the class and the output
    // schema: what each tool of the registry says of itself, in order, but
    // for what the server adds: `_meta` with the class and keying, and for
    // a tool keyed by a window the optional repeat argument and a sentence
    // in the description.
    let exported: Vec<Value> = registry()
        .iter()
        .map(|t| {
            let spec = t.spec();
            let mut tool = json!({
                "name": spec.name,
                "description": spec.description,
                "inputSchema": t.input_schema(),
                "annotations": t.class().annotations(),
            });
            if let Some(output) = t.mcp_output_schema() {
                tool["outputSchema"] = output;
            }
            tool
        })
        .collect();
    assert_eq!(tools.len(), exported.len());
    for (tool, exported) in tools.iter().zip(&exported) {
        let mut listed = serde_json::to_value(tool).unwrap();
        let meta = listed.as_object_mut().unwrap().remove("_meta").unwrap();
        assert_eq!(
            meta[CLASS_META],
            exported["annotations"]["readOnlyHint"]
                .as_bool()
                .map_or(json!(null), |_| meta[CLASS_META].clone())
        );
        let description = listed["description"].as_str().unwrap().to_owned();
        assert!(
            description.starts_with(exported["description"].as_str().unwrap()),
            "{description}"
        );
        if meta[KEYING_META] == "window" {
            assert!(description.contains(REPEAT_ARGUMENT), "{description}");
            let properties = listed["inputSchema"]["properties"].as_object_mut().unwrap();
            let repeat = properties.remove(REPEAT_ARGUMENT).unwrap();
            assert_eq!(repeat["type"], "integer");
        }
        listed["description"] = exported["description"].clone();
        assert_eq!(&listed, exported);
    }
    let keying = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        let meta = tool.meta.as_ref().unwrap();
        (meta[CLASS_META].clone(), meta[KEYING_META].clone())
    };
    for (name, class, keys) in [
        ("find_customer", "read", "none"),
        ("send_email", "idempotent_write", "window"),
        ("charge_card", "non_idempotent_write", "window"),
        ("create_customer", "non_idempotent_write", "natural"),
        ("delete_account", "irreversible", "window"),
    ] {
        assert_eq!(keying(name), (json!(class), json!(keys)), "{name}");
    }
    let by_name = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let hints = |name: &str| by_name(name).annotations.unwrap();
    assert_eq!(hints("find_customer").read_only_hint, Some(true));
    assert_eq!(hints("send_email").idempotent_hint, Some(true));
    assert_eq!(hints("send_email").read_only_hint, Some(false));
    assert_eq!(hints("charge_card").idempotent_hint, Some(false));
    assert_eq!(hints("charge_card").destructive_hint, Some(false));
    assert_eq!(hints("delete_account").destructive_hint, Some(true));

    // `Receipt` is an object with a JSON Schema. A read returning any JSON
    // and a write returning a string declare none: their output is text.
    let receipt = by_name("charge_card").output_schema.unwrap();
    assert_eq!(receipt["type"], "object");
    assert_eq!(receipt["properties"]["charge_id"]["type"], "string");
    assert!(by_name("find_customer").output_schema.is_none());
    assert!(by_name("send_email").output_schema.is_none());
    assert_eq!(
        by_name("charge_card").input_schema["required"],
        json!(["customer", "cents"])
    );
    // `cents: u64` keeps its range, without schemars' `format: uint64`,
    // which strict validators (Ajv's, in MCP clients) refuse.
    let cents = &by_name("charge_card").input_schema["properties"]["cents"];
    assert_eq!(cents["minimum"], 0, "{cents:?}");
    assert!(cents.get("format").is_none(), "{cents:?}");
    let listed = serde_json::to_string(&tools).unwrap();
    for format in ["uint", "int8", "int16", "int32", "int64", "float", "double"] {
        assert!(
            !listed.contains(&format!("\"format\":\"{format}")),
            "{listed}"
        );
    }
}

#[test]
fn get_tool_answers_for_registered_tools_only() {
    let ledger = Ledger::default();
    let server = server(&ledger);
    assert_eq!(server.get_tool("send_email").unwrap().name, "send_email");
    assert!(server.get_tool("send_emails").is_none());
}
