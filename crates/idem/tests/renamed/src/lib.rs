//! `idem` renamed to `my_idem` in Cargo.toml: `#[tool(crate = my_idem)]`
//! points the generated code at the renamed crate, and `tools!` finds it
//! on its own.

use my_idem::prelude::*;

/// Arguments of [`echo`].
#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Echo {
    /// What to say back.
    pub text: String,
}

/// Say the text back.
#[tool(class = "read", crate = my_idem)]
pub async fn echo(args: Echo) -> Result<String, ToolError> {
    Ok(args.text)
}

/// Store a note.
#[my_idem::tool(class = "idempotent_write", crate = ::my_idem, ttl = "1h")]
pub fn store_note(args: Echo, ctx: &ToolCtx) -> Result<bool, ToolError> {
    Ok(ctx.key().is_some() && !args.text.is_empty())
}

/// Both tools, registered through the renamed crate.
pub fn registry() -> my_idem::Registry {
    my_idem::tools![echo, store_note]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_of_a_renamed_dependency_work() {
        assert_eq!(echo::SPEC.name, "echo");
        assert_eq!(
            store_note::SPEC.ttl,
            Some(std::time::Duration::from_secs(3600))
        );
        let names: Vec<_> = registry().names().collect();
        assert_eq!(names, ["echo", "store_note"]);

        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ctx = ToolCtx::new("echo", ClassKind::Read);
        let said = runtime.block_on(Tool::<()>::call(
            &echo,
            Echo {
                text: "hello".into(),
            },
            &ctx,
            &(),
        ));
        assert_eq!(said.unwrap(), "hello");
    }
}
