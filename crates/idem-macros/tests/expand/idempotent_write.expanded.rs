// An `idempotent_write` tool with the context and state access.

/// Send an email to a customer.
#[allow(non_camel_case_types)]
#[derive(
    ::core::clone::Clone,
    ::core::marker::Copy,
    ::core::fmt::Debug,
    ::core::default::Default,
)]
struct send_email;
impl send_email {
    async fn run(
        args: SendEmail,
        ctx: &ToolCtx,
        State(mailer): State<Mailer>,
    ) -> Result<EmailSent, ToolError> {
        let message_id = format!("<{}@example.com>", ctx.key().unwrap());
        mailer.send(&args.to, &message_id).await?;
        Ok(EmailSent { message_id })
    }
}
impl ::idem::__private::ToolDef for send_email {
    type Class = ::idem::__private::IdempotentWrite;
    type Args = SendEmail;
    type Output = EmailSent;
    const SPEC: ::idem::__private::ToolSpec = ::idem::__private::ToolSpec {
        timeout: ::core::option::Option::Some(::core::time::Duration::from_secs(30)),
        max_attempts: ::core::option::Option::Some(5),
        ..::idem::__private::ToolSpec::new("send_email", "Send an email to a customer.")
    };
    fn output_schema() -> ::core::option::Option<::idem::__private::schemars::Schema> {
        use ::idem::__private::{WithOutputSchema as _, WithoutOutputSchema as _};
        (&::idem::__private::OutputSchemaProbe::<
            <Self as ::idem::__private::ToolDef>::Output,
        >::NEW)
            .output_schema()
    }
}
impl<__S> ::idem::__private::Tool<__S> for send_email
where
    __S: ::core::marker::Send + ::core::marker::Sync + 'static,
    Mailer: ::idem::__private::FromRef<__S>,
{
    fn call(
        &self,
        __args: SendEmail,
        __ctx: &::idem::__private::ToolCtx,
        __state: &__S,
    ) -> impl ::core::future::Future<
        Output = ::core::result::Result<EmailSent, ::idem::__private::ToolError>,
    > + ::core::marker::Send {
        async move {
            ::idem::__private::into_tool_result(
                Self::run(__args, __ctx, ::idem::__private::State::from_state(__state))
                    .await,
            )
        }
    }
}
