// A `non_idempotent_write` tool with a natural key (find-or-create).

/// Create a customer unless one with this email exists.
#[allow(non_camel_case_types)]
#[derive(
    ::core::clone::Clone,
    ::core::marker::Copy,
    ::core::fmt::Debug,
    ::core::default::Default,
)]
struct create_customer;
impl create_customer {
    async fn run(
        args: NewCustomer,
        State(db): State<Db>,
    ) -> Result<CustomerId, ToolError> {
        db.insert(args).await
    }
}
impl ::idem::__private::ToolDef for create_customer {
    type Class = ::idem::__private::NonIdempotentWrite;
    type Args = NewCustomer;
    type Output = CustomerId;
    const SPEC: ::idem::__private::ToolSpec = ::idem::__private::ToolSpec {
        key: ::idem::__private::KeySpec::Natural {
            fields: &["email", "country"],
            window: ::core::option::Option::Some(
                ::core::time::Duration::from_secs(86400),
            ),
        },
        key_version: 2,
        ttl: ::core::option::Option::Some(::core::time::Duration::from_secs(604800)),
        ..::idem::__private::ToolSpec::new(
            "create_customer",
            "Create a customer unless one with this email exists.",
        )
    };
    fn key_material(
        __args: &NewCustomer,
    ) -> ::core::option::Option<::idem::__private::KeyMaterial> {
        ::idem::__private::natural_key([
            ("email", ::idem::__private::key_field(&normalize_email(&__args.email))),
            ("country", ::idem::__private::key_field(&__args.country)),
        ])
    }
    fn output_schema() -> ::core::option::Option<::idem::__private::schemars::Schema> {
        use ::idem::__private::{WithOutputSchema as _, WithoutOutputSchema as _};
        (&::idem::__private::OutputSchemaProbe::<
            <Self as ::idem::__private::ToolDef>::Output,
        >::NEW)
            .output_schema()
    }
}
impl<__S> ::idem::__private::Tool<__S> for create_customer
where
    __S: ::core::marker::Send + ::core::marker::Sync + 'static,
    Db: ::idem::__private::FromRef<__S>,
{
    fn call(
        &self,
        __args: NewCustomer,
        __ctx: &::idem::__private::ToolCtx,
        __state: &__S,
    ) -> impl ::core::future::Future<
        Output = ::core::result::Result<CustomerId, ::idem::__private::ToolError>,
    > + ::core::marker::Send {
        async move {
            ::idem::__private::into_tool_result(
                Self::run(__args, ::idem::__private::State::from_state(__state)).await,
            )
        }
    }
}
