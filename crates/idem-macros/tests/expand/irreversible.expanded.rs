// An `irreversible` tool with a custom key, a reconcile hook and a name
// and description given in the attribute.

#[allow(non_camel_case_types)]
#[derive(
    ::core::clone::Clone,
    ::core::marker::Copy,
    ::core::fmt::Debug,
    ::core::default::Default,
)]
struct refund;
impl refund {
    async fn run(
        args: Refund,
        ctx: &ToolCtx,
        State(payments): State<Payments>,
    ) -> Result<RefundId, ToolError> {
        payments.refund(args.order, ctx.key()).await
    }
}
impl ::idem::__private::ToolDef for refund {
    type Class = ::idem::__private::Irreversible;
    type Args = Refund;
    type Output = RefundId;
    const SPEC: ::idem::__private::ToolSpec = ::idem::__private::ToolSpec {
        key: ::idem::__private::KeySpec::Custom,
        has_reconcile: true,
        ..::idem::__private::ToolSpec::new(
            "refund_order",
            "Refund an order in full. Cannot be undone.",
        )
    };
    fn key_material(
        __args: &Refund,
    ) -> ::core::option::Option<::idem::__private::KeyMaterial> {
        ::idem::__private::custom_key(refund_key(__args))
    }
    fn output_schema() -> ::core::option::Option<::idem::__private::schemars::Schema> {
        use ::idem::__private::{WithOutputSchema as _, WithoutOutputSchema as _};
        (&::idem::__private::OutputSchemaProbe::<
            <Self as ::idem::__private::ToolDef>::Output,
        >::NEW)
            .output_schema()
    }
}
impl<__S> ::idem::__private::Tool<__S> for refund
where
    __S: ::core::marker::Send + ::core::marker::Sync + 'static,
    Payments: ::idem::__private::FromRef<__S>,
{
    fn call(
        &self,
        __args: Refund,
        __ctx: &::idem::__private::ToolCtx,
        __state: &__S,
    ) -> impl ::core::future::Future<
        Output = ::core::result::Result<RefundId, ::idem::__private::ToolError>,
    > + ::core::marker::Send {
        async move {
            ::idem::__private::into_tool_result(
                Self::run(__args, __ctx, ::idem::__private::State::from_state(__state))
                    .await,
            )
        }
    }
    fn reconcile(
        &self,
        __args: &Refund,
        __ctx: &::idem::__private::ToolCtx,
        __state: &__S,
    ) -> impl ::core::future::Future<
        Output = ::core::result::Result<
            ::idem::__private::Reconciled<RefundId>,
            ::idem::__private::ToolError,
        >,
    > + ::core::marker::Send {
        find_refund(__args, __ctx, ::idem::__private::State::from_state(__state))
    }
}
