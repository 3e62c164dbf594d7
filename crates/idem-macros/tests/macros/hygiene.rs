//! The generated code means the same whatever the caller's scope holds:
//! every prelude name it could use is shadowed here by something useless,
//! and the tools still compile and run.
#![allow(non_camel_case_types, dead_code, unused_imports, unused_macros)]

mod tools {
    use idem::prelude::*;
    use idem::Reconciled;

    // Shadow the prelude's types, traits, variants and macros.
    struct Option;
    struct Result;
    struct Box;
    struct String;
    struct Vec;
    struct Ok;
    struct Err;
    struct Some;
    struct None;
    trait Send {}
    trait Sync {}
    trait Clone {}
    trait Copy {}
    trait Default {}
    trait Debug {}
    trait Future {}
    trait Into {}
    trait From {}
    mod core {}
    mod std {}
    mod serde {}
    mod serde_json {}
    // (Not `mod schemars {}`: schemars' own derive resolves `schemars::…`
    // relative to the caller.)
    mod idem_runtime {}
    macro_rules! panic {
        ($($t:tt)*) => {
            compile_error!("the caller's panic! was used")
        };
    }
    macro_rules! concat {
        ($($t:tt)*) => {
            compile_error!("the caller's concat! was used")
        };
    }

    // The body moves to an associated function `run`: a caller's `run` is
    // not in its way. (The expansion's own bindings are `__`-prefixed so a
    // tool named `args`, `ctx` or `state` cannot turn them into patterns.)
    struct run;

    #[derive(
        ::core::clone::Clone, ::serde::Deserialize, ::serde::Serialize, ::schemars::JsonSchema,
    )]
    pub struct Args {
        pub email: ::std::string::String,
    }

    #[derive(::core::clone::Clone)]
    pub struct Mailer;

    pub fn lower(s: &str) -> ::std::string::String {
        s.to_lowercase()
    }

    /// Send an email.
    #[tool(
        class = "non_idempotent_write",
        key = natural(fields(email = lower), window = "1h"),
        ttl = "1d",
        timeout = "10s",
        reconcile = look,
    )]
    pub async fn state(
        args: Args,
        ctx: &ToolCtx,
        State(_m): State<Mailer>,
    ) -> ::core::result::Result<usize, ToolError> {
        let _ = ctx.key();
        ::core::result::Result::Ok(args.email.len())
    }

    pub async fn look(
        _args: &Args,
        _ctx: &ToolCtx,
        _m: State<Mailer>,
    ) -> ::core::result::Result<Reconciled<usize>, ToolError> {
        ::core::result::Result::Ok(Reconciled::Unknown)
    }

    /// A read. (A tool's name becomes a unit struct: a tool named `ctx`
    /// here would turn the `ctx` parameter above into a pattern.)
    #[tool(class = "read", max_attempts = 2)]
    pub fn lookup(args: Args) -> ::core::result::Result<::std::string::String, ToolError> {
        ::core::result::Result::Ok(args.email)
    }
}

use idem::prelude::*;
use tools::{lookup, state};

#[tokio::test]
async fn shadowed_prelude_names_do_not_change_the_expansion() {
    ::core::assert_eq!(<state as ToolDef>::SPEC.name, "state");
    ::core::assert_eq!(
        <lookup as ToolDef>::SPEC.max_attempts,
        ::core::option::Option::Some(2)
    );
    let args = tools::Args {
        email: "ADA@EXAMPLE.COM".into(),
    };
    let material = <state as ToolDef>::key_material(&args).unwrap();
    ::core::assert_eq!(
        material,
        idem::KeyMaterial::Natural(::serde_json::json!({ "email": "ada@example.com" }))
    );
    let tool_ctx = ToolCtx::new("lookup", ClassKind::Read);
    let out = Tool::<tools::Mailer>::call(&lookup, args.clone(), &tool_ctx, &tools::Mailer).await;
    ::core::assert_eq!(out.unwrap(), "ADA@EXAMPLE.COM");
    let out = Tool::<tools::Mailer>::call(&state, args, &tool_ctx, &tools::Mailer).await;
    ::core::assert_eq!(out.unwrap(), 15);
    let registry: idem::Registry<tools::Mailer> = tools![state, lookup];
    ::core::assert_eq!(registry.len(), 2);
}
