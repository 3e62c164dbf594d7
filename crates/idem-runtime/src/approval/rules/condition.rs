//! A rule's condition (`when = "…"`): an expression of the Common
//! Expression Language (CEL, as Kubernetes' admission policies and
//! agentgateway write theirs), through the `cel` crate of the cel-rust
//! project, over the call:
//!
//! | variable | what |
//! |---|---|
//! | `args` | the call's arguments, as JSON values (`args.amount`, `args["to"]`) |
//! | `tool` | the tool's name |
//! | `namespace` | the call's namespace (`""` for none) |
//! | `principal` | who asked, as authenticated (`""` when unnamed) |
//! | `time` | the store's time, UTC: `time.unix` (seconds), `time.hour` (0–23), `time.minute`, `time.weekday` (1 Monday – 7 Sunday), `time.date` (`"2026-12-07"`) |
//!
//! The expression is parsed once, when the rules are checked; a call's
//! values are handed to it as data, never spliced into its text, so an
//! argument holding quotes, newlines or look-alike letters is a string
//! like any other and cannot change how the condition reads. A condition
//! must yield a boolean; one that fails on a call (a missing argument, a
//! type that does not compare) is an error, which the rules treat as the
//! stricter answer ([`super::Rules::decide`]).

use std::sync::{Arc, LazyLock};

use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

use crate::clock::Timestamp;

/// The variables a condition may name.
pub(super) const VARIABLES: [&str; 5] = ["args", "tool", "namespace", "principal", "time"];

/// CEL's standard environment, built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A checked condition.
#[derive(Clone)]
pub(super) struct Condition {
    source: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

/// The call a condition is asked about.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The namespace (`None`: none).
    pub namespace: Option<&'a str>,
    /// Who asked, as authenticated (`None`: unnamed).
    pub principal: Option<&'a str>,
    /// The arguments (`None`: not known, as for a tool that keeps its
    /// arguments out of the store, read back by an operator).
    pub args: Option<&'a Value>,
    /// The store's time.
    pub now: Timestamp,
}

impl Condition {
    /// `source`, parsed: refused with CEL's reason when it does not
    /// parse, and when it names a variable the call does not have.
    pub(super) fn parse(source: &str) -> Result<Condition, String> {
        let program = ENV
            .compile(source)
            .map_err(|e| format!("its condition does not parse: {}", one_line(&e.to_string())))?;
        let references = program.references();
        let mut unknown: Vec<&str> = references
            .variables()
            .into_iter()
            .filter(|v| !VARIABLES.contains(v) && !bound_in(source, v))
            .collect();
        unknown.sort_unstable();
        if let Some(name) = unknown.first() {
            return Err(format!(
                "its condition names `{name}`, which a call does not have: use {}",
                VARIABLES.map(|v| format!("`{v}`")).join(", ")
            ));
        }
        Ok(Condition {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// The condition as written.
    pub(super) fn source(&self) -> &str {
        &self.source
    }

    /// Whether the condition holds for the call whose values are
    /// `bindings`: an error when it fails or does not yield a boolean.
    pub(super) fn holds(&self, bindings: &Bindings) -> Result<bool, String> {
        let mut context = Context::with_env(ENV.clone());
        for (name, value) in VARIABLES.iter().zip(&bindings.0) {
            context.add_variable_from_value(*name, value.clone());
        }
        match self.program.execute(&context) {
            Ok(Cel::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!(
                "the condition yields {}, not true or false",
                kind(&other)
            )),
            Err(e) => Err(one_line(&e.to_string())),
        }
    }
}

/// A call's values as CEL values, in the order of [`VARIABLES`]: made
/// once per call, whatever number of conditions read them.
#[derive(Debug, Clone)]
pub(super) struct Bindings([Cel; 5]);

impl Bindings {
    /// The values of `call`.
    pub(super) fn of(call: &Call<'_>) -> Result<Bindings, String> {
        let args = match call.args {
            Some(args) => cel::to_value(args).map_err(|e| e.to_string())?,
            None => Cel::Null,
        };
        let text = |s: Option<&str>| Cel::from(s.unwrap_or("").to_owned());
        Ok(Bindings([
            args,
            text(Some(call.tool)),
            text(call.namespace),
            text(call.principal),
            time(call.now)?,
        ]))
    }
}

/// Whether `name` is bound by a comprehension in `source` (`x` in
/// `args.items.all(x, x.cents < 100)`): a variable of the expression's
/// own, not of the call.
fn bound_in(source: &str, name: &str) -> bool {
    ["all", "exists", "exists_one", "map", "filter"]
        .iter()
        .any(|m| {
            let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
            compact.contains(&format!(".{m}({name},"))
        })
}

/// `time`'s fields at `now` (UTC).
fn time(now: Timestamp) -> Result<Cel, String> {
    let civil = now.civil();
    let days = now.as_millis() / 86_400_000;
    let fields = serde_json::json!({
        "unix": now.as_millis() / 1000,
        "hour": civil.hour,
        "minute": civil.minute,
        // 1970-01-01 was a Thursday (4).
        "weekday": (days + 3) % 7 + 1,
        "date": format!("{:04}-{:02}-{:02}", civil.year, civil.month, civil.day),
    });
    cel::to_value(fields).map_err(|e| e.to_string())
}

/// A CEL value's kind, in words.
fn kind(value: &Cel) -> &'static str {
    match value {
        Cel::Null => "null",
        Cel::Int(_) | Cel::UInt(_) | Cel::Float(_) => "a number",
        Cel::String(_) => "a string",
        Cel::List(_) => "a list",
        Cel::Map(_) => "a map",
        _ => "a value",
    }
}

/// `text` on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
