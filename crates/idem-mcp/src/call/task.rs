//! A call's task ([`crate::tasks`]): made when the call waits for
//! an operator, and carried on by `tasks/get`.

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, TaskPayload,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{json, Value};

use std::time::Duration;

use rmcp::model::CallToolResponse;

use super::{error_result, Prepared, Tools};
use crate::policy::Keyed;
use crate::tasks::{self, Ticket};
use idem_runtime::dispatch::Arguments;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Status;
use idem_runtime::store::StoreExt;
use idem_runtime::{ClaimedKey, IdemError, RunContext, ToolCall, ToolResult};

impl<S: Send + Sync + 'static> Tools<S> {
    /// A task for the call awaiting approval under `key`, keyed as this
    /// call was; `None` when its record cannot be read.
    pub(super) async fn task_for(
        &self,
        key: &IdempotencyKey,
        call: &ToolCall,
        run: &RunContext,
        principal: Option<&str>,
    ) -> Option<CreateTaskResult> {
        let store = self.dispatcher.executor().store();
        let record = store.get(key).await.ok().flatten()?;
        let now = store.now().await.ok()?.as_millis();
        let ticket = Ticket {
            key: key.as_str().to_owned(),
            tool: call.name.clone(),
            call_id: call.id.clone(),
            run: run.run_id.clone().map(|id| (id, run.step)),
            namespace: run
                .namespace
                .clone()
                .unwrap_or_default()
                .as_str()
                .to_owned(),
            window: run
                .repeat_window
                .map(|w| (w.within.as_secs(), w.repeat, record.created_at.as_millis())),
            created_at: now,
        };
        let id = self.states.seal_ticket(&ticket, principal);
        let payload = TaskPayload::Working;
        let message = Some(status_message(record.status()));
        let mut created = CreateTaskResult::new(tasks::task(id, now, now, &payload, message));
        // The record's key, as on every answer: an operator's handle on it.
        created.meta = Some(super::results::result_meta(false, Some(key.as_str())));
        Some(created)
    }

    /// How long a call of the tool at `index` runs before a client that
    /// takes tasks is answered with one: never for a read (it has no
    /// record to read the result from later; it may be called again).
    pub(super) fn task_after(
        &self,
        index: usize,
        context: &RequestContext<RoleServer>,
    ) -> Option<Duration> {
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        (takes_tasks && self.keyed[index] != Keyed::Not)
            .then_some(self.tasks_after)
            .flatten()
    }

    /// Dispatch the prepared call, and answer with a task for its record if
    /// it is still running `after` it started; the call goes on, and
    /// `tasks/get` reads its outcome from the record once it is there.
    pub(super) async fn dispatch_or_task(
        &self,
        prepared: &Prepared,
        after: Duration,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolResult, CallToolResponse> {
        let name = &prepared.call.name;
        let claimed = ClaimedKey::new();
        let (call, run) = (prepared.call.clone(), prepared.run.clone());
        let mut running = self.spawn(call, run, context, Some(claimed.clone()));
        let done = |joined: Result<ToolResult, tokio::task::JoinError>| {
            joined.map_err(|e| super::results::panicked(name, e).into())
        };
        tokio::select! {
            biased;
            joined = &mut running => return done(joined),
            () = context.ct.cancelled() => return Err(super::results::cancelled(name).into()),
            () = tokio::time::sleep(after) => {}
        }
        // Still running, under a key (a call that has not claimed one yet
        // is waited for as any other).
        if let Some(key) = claimed.get() {
            let principal = prepared.principal.as_deref();
            let (call, run) = (&prepared.call, &prepared.run);
            if let Some(task) = self.task_for(key, call, run, principal).await {
                tracing::debug!(tool = %name, "a long call answered with a task");
                return Err(task.into());
            }
        }
        tokio::select! {
            biased;
            joined = &mut running => done(joined),
            () = context.ct.cancelled() => Err(super::results::cancelled(name).into()),
        }
    }

    /// `tasks/get`: where the call a task names stands, carried on when
    /// its approval has landed.
    pub(crate) async fn task(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let principal = self.principal.as_ref().and_then(|f| f(context));
        let ticket = self
            .states
            .open_ticket(id, principal.as_deref())
            .map_err(|e| ErrorData::invalid_params(e, None))?;
        let Some(&index) = self.by_name.get(&ticket.tool) else {
            return Err(ErrorData::invalid_params(
                format!("task `{id}` is for a tool this server no longer has"),
                None,
            ));
        };
        let definition = &self.definitions[index];
        let hints = self.hints(index);
        let store = self.dispatcher.executor().store();
        let now = store.now().await.map_or(0, |t| t.as_millis());
        let key = IdempotencyKey::parse(&ticket.key)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let record = store
            .get(&key)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let (payload, message) = match record {
            None => (
                TaskPayload::Failed {
                    error: object(json!({
                        "code": ErrorData::invalid_params("", None).code,
                        "message": "the call this task waited for is no longer recorded",
                    })),
                },
                None,
            ),
            Some(record) => match record.status() {
                status @ (Status::AwaitingApproval | Status::InFlight) => {
                    (TaskPayload::Working, Some(status_message(status)))
                }
                _ => match &record.info.args {
                    // Approved: run it once, under its key; decided or
                    // done: answered from the record.
                    Some(args) => {
                        let call = ToolCall {
                            id: ticket.call_id.clone(),
                            name: ticket.tool.clone(),
                            arguments: Arguments::Text(args.clone()),
                        };
                        let run = ticket
                            .run()
                            .map_err(|e| ErrorData::invalid_params(e, None))?;
                        let answer = match self.dispatch(call, run, context).await {
                            Ok(result) if is_pending(&result) => {
                                (TaskPayload::Working, Some(WAITING_FOR_APPROVAL))
                            }
                            Ok(mut result) => {
                                // The task is the call: its result is the
                                // call's own, not a repeat's, however often
                                // it is read from the record.
                                if let Ok(called) = &mut result.result {
                                    called.meta.deduplicated = false;
                                }
                                let answer = self.answer(&result, definition, hints, false, true);
                                (completed(answer.await), None)
                            }
                            Err(answer) => (completed(answer), None),
                        };
                        answer
                    }
                    None => (
                        completed(error_result(
                            format!(
                                "`{}` does not store its arguments, so this task cannot carry \
                                 it on: call it again with the same arguments.",
                                ticket.tool
                            ),
                            json!({"code": "arguments_not_stored"}),
                            false,
                            Some(&ticket.key),
                        )),
                        None,
                    ),
                },
            },
        };
        let task = tasks::task(id.to_owned(), ticket.created_at, now, &payload, message);
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }
}

/// What a task waiting for an approval says.
const WAITING_FOR_APPROVAL: &str = "waiting for a person's approval; nothing has run yet";

/// What a working task says of its call's record in `status`.
fn status_message(status: Status) -> &'static str {
    match status {
        Status::AwaitingApproval => WAITING_FOR_APPROVAL,
        _ => "running; its result is recorded when it ends",
    }
}

/// Whether a dispatched call is still waiting for a person.
fn is_pending(result: &ToolResult) -> bool {
    matches!(result.result, Err(IdemError::ApprovalPending { .. }))
}

/// A completed task's payload: the call's result.
fn completed(result: CallToolResult) -> TaskPayload {
    let value = serde_json::to_value(result).expect("a result serializes");
    TaskPayload::Completed {
        result: object(value),
    }
}

/// A JSON object, or an empty one.
fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}
