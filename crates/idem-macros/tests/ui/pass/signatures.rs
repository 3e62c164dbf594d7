use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Args {
    pub id: u64,
}

#[derive(Clone)]
pub struct Db;

#[derive(Clone)]
pub struct Clock;

#[derive(Clone)]
pub struct App {
    db: Db,
    clock: Clock,
}

impl FromRef<App> for Db {
    fn from_ref(app: &App) -> Db {
        app.db.clone()
    }
}

impl FromRef<App> for Clock {
    fn from_ref(app: &App) -> Clock {
        app.clock.clone()
    }
}

/// State and context in any order after the arguments; a pattern for the
/// arguments.
#[tool(class = "idempotent_write")]
async fn a(
    Args { id }: Args,
    State(_clock): State<Clock>,
    _ctx: &ToolCtx,
    _db: idem::State<Db>,
) -> Result<u64, ToolError> {
    Ok(id)
}

#[derive(Debug)]
pub struct DbError;

impl From<DbError> for ToolError {
    fn from(_: DbError) -> ToolError {
        ToolError::transient("database unavailable")
    }
}

/// An error type of the tool's own that converts into `ToolError`.
#[tool(class = "read")]
fn b(_args: Args) -> Result<(), DbError> {
    Err(DbError)
}

/// Public tools in a module, used from outside it.
pub mod tools {
    use idem::prelude::*;

    /// Public.
    #[tool(class = "read")]
    pub async fn visible(args: super::Args) -> Result<u64, ToolError> {
        Ok(args.id)
    }
}

fn assert_tool<S, T: Tool<S>>(_: T) {}

fn main() {
    assert_tool::<App, _>(a);
    assert_tool::<App, _>(b);
    assert_tool::<(), _>(tools::visible);
    let registry: idem::Registry<App> = tools![a, b, tools::visible];
    assert_eq!(registry.len(), 3);
}
