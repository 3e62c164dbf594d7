//! `idem key`: derive a call's key as the executor does (`docs/keys.md`),
//! from what a transcript shows: the tool, the call id or the run and step
//! with the arguments, or (a call that carried no key) the repeat window
//! and the effect's generation. Reads no store.

use idem_runtime::key::{derive_key, CanonicalArgs, KeyInput, KeySource, Namespace};
use serde_json::Value;

use super::Output;
use crate::cli::KeyDeriveArgs;
use crate::error::CliError;
use crate::render::json::KeyJson;

/// `idem key`: print the derived key (or its JSON).
pub(super) fn run(args: &KeyDeriveArgs, out: &Output) -> Result<(), CliError> {
    let namespace = Namespace::new(args.namespace.clone())?;
    let canonical = match &args.args {
        Some(text) => Some(CanonicalArgs::from_value(&json("--args", text)?)?),
        None => None,
    };
    let fields;
    let (source, tag) = match (&args.call_id, &args.run, &args.natural, &args.custom) {
        (Some(id), ..) => (KeySource::CallId(id), "call"),
        (_, Some(run), ..) => {
            let (Some(step), Some(canonical)) = (args.step, &canonical) else {
                return Err(CliError::Needs {
                    option: "--run",
                    needs: "--step and --args",
                });
            };
            let source = KeySource::Step {
                run_id: run,
                step,
                args: canonical,
            };
            (source, "step")
        }
        (_, _, Some(natural), _) => {
            fields = json("--natural", natural)?;
            if !fields.is_object() {
                return Err(CliError::NaturalKeyNotAnObject);
            }
            let source = KeySource::Natural {
                fields: &fields,
                window: args.window,
            };
            (source, "natural")
        }
        (_, _, _, Some(material)) => (KeySource::Custom(material), "custom"),
        _ => match (args.repeat_window, args.generation, &canonical) {
            (Some(seconds), Some(generation), Some(canonical)) => {
                let source = KeySource::Window {
                    seconds: seconds.max(1),
                    number: generation,
                    repeat: args.repeat,
                    args: canonical,
                };
                (source, "window")
            }
            _ => return Err(CliError::NoKeySource),
        },
    };
    let key = derive_key(&KeyInput {
        version: args.key_version,
        namespace: &namespace,
        tool: &args.tool,
        source,
    })?;
    if out.json {
        return out.json(&KeyJson {
            key: key.as_str().to_owned(),
            source: tag,
            version: args.key_version,
            namespace: namespace.as_str().to_owned(),
            tool: args.tool.clone(),
            fingerprint: canonical
                .as_ref()
                .map(|c| c.fingerprint.as_str().to_owned()),
            canonical_arguments: canonical.map(|c| c.text),
        });
    }
    out.text(&format!("{key}\n"))
}

/// The JSON an option (`--args`, `--natural`) holds.
fn json(option: &'static str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|source| CliError::InvalidJson { option, source })
}
