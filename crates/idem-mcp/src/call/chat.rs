//! Asking the person in the chat ([`crate::ask`]) about a call
//! awaiting approval, and taking the answer they gave.

use rmcp::model::{InputResponses, Tool};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use super::Tools;
use crate::ask::{self, Answer, Form};
use idem_runtime::key::IdempotencyKey;

impl<S: Send + Sync + 'static> Tools<S> {
    /// Who answers in the chat: the principal as authenticated (the name
    /// the approval rules know), or "the chat user"; and the client they
    /// answer in, for the note beside it.
    fn chat_user(principal: Option<&str>, context: &RequestContext<RoleServer>) -> ask::ChatUser {
        ask::ChatUser {
            name: principal.unwrap_or("the chat user").to_owned(),
            client: context.client_info().map(|c| c.name.clone()),
        }
    }

    /// Ask the person in the chat about the call awaiting approval under
    /// `key`, once; `fingerprint` is of the arguments as the client sent
    /// them, which an answer must come back with.
    pub(super) async fn ask_in_chat(
        &self,
        definition: &Tool,
        key: &IdempotencyKey,
        fingerprint: &str,
        principal: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Asked {
        let Some(form) = ask::form(context) else {
            return Asked::Pending;
        };
        let operator = self.dispatcher.executor().operator();
        let record = match operator.show(key).await {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the call awaiting approval");
                return Asked::Pending;
            }
        };
        match operator.was_asked(key).await {
            Ok(false) => {}
            Ok(true) => return Asked::Pending,
            Err(e) => {
                tracing::warn!(error = %e, "could not read whether the chat user was asked");
                return Asked::Pending;
            }
        }
        let who = Self::chat_user(principal, context);
        if let Err(e) = ask::note_asked(&operator, &record, &who.to_string()).await {
            tracing::warn!(error = %e, "could not note the question; not asking");
            return Asked::Pending;
        }
        let description = self
            .dispatcher
            .registry()
            .get(&definition.name)
            .map_or("", |tool| tool.spec().description);
        let question = ask::question(&definition.name, description, &record);
        match form {
            Form::InputRequired => Asked::Later(self.states.ask_later(
                question,
                &record,
                fingerprint,
                principal,
                &definition.name,
            )),
            Form::Request => {
                let answer = ask::ask_now(context, question).await;
                if answer == Answer::None {
                    return Asked::Pending;
                }
                match ask::record_answer(&operator, &record, answer, &who).await {
                    Ok(()) => Asked::Answered,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not record the chat user's answer");
                        Asked::Pending
                    }
                }
            }
        }
    }

    /// Record the answer a client returned with a request state.
    pub(super) async fn take_answer(
        &self,
        state: &str,
        responses: Option<&InputResponses>,
        fingerprint: &str,
        principal: Option<&str>,
        tool: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), String> {
        let (key, asked_fingerprint, created_at, answer) =
            self.states.answered(state, responses, principal, tool)?;
        if asked_fingerprint != fingerprint {
            return Err(
                "the approval answer was given for other arguments than this call's".to_owned(),
            );
        }
        let key = IdempotencyKey::parse(&key).map_err(|e| e.to_string())?;
        let operator = self.dispatcher.executor().operator();
        let record = operator.show(&key).await.map_err(|e| e.to_string())?;
        if record.created_at.as_millis() != created_at {
            // Another request under the key since: not what was asked.
            return Ok(());
        }
        let who = Self::chat_user(principal, context);
        ask::record_answer(&operator, &record, answer, &who)
            .await
            .map_err(|e| e.to_string())
    }
}

/// What asking the person in the chat came to.
pub(super) enum Asked {
    /// Asked in the answer (protocol 2026-07-28): return it.
    Later(rmcp::model::InputRequiredResult),
    /// They answered, and the answer is recorded: dispatch again.
    Answered,
    /// Not asked (no elicitation, asked before), or no answer: the call
    /// stays pending.
    Pending,
}
