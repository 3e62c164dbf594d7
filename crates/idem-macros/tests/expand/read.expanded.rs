// A `read` tool: a plain `fn`, no options, no state.

/// Look a customer up by email.
#[allow(non_camel_case_types)]
#[derive(
    ::core::clone::Clone,
    ::core::marker::Copy,
    ::core::fmt::Debug,
    ::core::default::Default,
)]
struct lookup_customer;
impl lookup_customer {
    fn run(args: Lookup) -> Result<Customer, ToolError> {
        Ok(Customer::find(&args.email))
    }
}
impl ::idem::__private::ToolDef for lookup_customer {
    type Class = ::idem::__private::Read;
    type Args = Lookup;
    type Output = Customer;
    const SPEC: ::idem::__private::ToolSpec = ::idem::__private::ToolSpec::new(
        "lookup_customer",
        "Look a customer up by email.",
    );
    fn output_schema() -> ::core::option::Option<::idem::__private::schemars::Schema> {
        use ::idem::__private::{WithOutputSchema as _, WithoutOutputSchema as _};
        (&::idem::__private::OutputSchemaProbe::<
            <Self as ::idem::__private::ToolDef>::Output,
        >::NEW)
            .output_schema()
    }
}
impl<__S> ::idem::__private::Tool<__S> for lookup_customer
where
    __S: ::core::marker::Send + ::core::marker::Sync + 'static,
{
    fn call(
        &self,
        __args: Lookup,
        __ctx: &::idem::__private::ToolCtx,
        __state: &__S,
    ) -> impl ::core::future::Future<
        Output = ::core::result::Result<Customer, ::idem::__private::ToolError>,
    > + ::core::marker::Send {
        async move { ::idem::__private::into_tool_result(Self::run(__args)) }
    }
}
