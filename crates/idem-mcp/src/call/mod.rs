//! One `tools/call`: keyed from the request under the server's policy, run
//! on a task of its own through the dispatcher, approved in the chat when
//! it waits for a person, and answered as a `CallToolResult` written for a
//! model.

// The steps of a call return `Result<_, CallToolResponse>`: the error *is*
// the answer that ends the call there (a refusal, a question, a task),
// built once per call; boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use idem_runtime::store::StoreExt;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, InputResponses, JsonObject, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{json, Value};
use tracing::Instrument as _;

pub(crate) mod access;
mod chat;
mod results;
mod task;

use results::{
    bad_key_fields, bad_repeat, cancelled, error_result, panicked, refused, result_meta,
};

use chat::Asked;

use super::answer::{self, Hints};
use super::ask::States;
use super::key::{self, Keying};
use super::policy::{Approver, Keyed, Unkeyed, REPEAT_ARGUMENT};
use super::trace;
use idem_runtime::dispatch::Arguments;
use idem_runtime::key::{CanonicalArgs, IdempotencyKey};
use idem_runtime::{
    Dispatcher, ErrorCode, IdemError, Namespace, RepeatWindow, RunContext, ToolCall, ToolResult,
};

tokio::task_local! {
    /// Where the progress of the `tools/call` being dispatched goes: its
    /// client's progress token and session, if it asked for progress.
    static REQUEST_PROGRESS: Option<(rmcp::model::ProgressToken, rmcp::Peer<RoleServer>)>;
}

/// Where the progress of the `tools/call` this task dispatches goes, if
/// its client asked for progress: for a tool that forwards progress (the
/// proxy's upstream tools), so that each request's progress reaches
/// exactly that request, however many identical calls run at once and in
/// whichever session.
#[cfg(feature = "proxy")]
pub(crate) fn request_progress() -> Option<(rmcp::model::ProgressToken, rmcp::Peer<RoleServer>)> {
    REQUEST_PROGRESS.try_with(Clone::clone).ok().flatten()
}

/// The principal of a request: who is calling, for the namespace its calls
/// are keyed in.
pub(crate) type PrincipalFn = dyn Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync;

/// What a server and its router fragments share: the dispatcher, the
/// author's choices, and the tools' definitions under them.
pub(crate) struct Tools<S> {
    pub(crate) dispatcher: Dispatcher<S>,
    pub(crate) namespace: Option<Namespace>,
    pub(crate) unkeyed: Unkeyed,
    /// Tools keyed otherwise than [`Tools::unkeyed`] says.
    pub(crate) unkeyed_by_tool: HashMap<String, Unkeyed>,
    pub(crate) principal: Option<Arc<PrincipalFn>>,
    pub(crate) approvers: HashMap<String, Approver>,
    pub(crate) default_approver: Approver,
    pub(crate) states: States,
    /// In registration order.
    pub(crate) definitions: Vec<Tool>,
    /// How each tool (same order) is keyed.
    keyed: Vec<Keyed>,
    /// Whether each tool (same order) was given [`REPEAT_ARGUMENT`].
    repeat: Vec<bool>,
    by_name: HashMap<String, usize>,
    /// How long a keyed call runs before a client that takes tasks gets
    /// one (`McpServer::tasks_after`).
    pub(crate) tasks_after: Option<std::time::Duration>,
    /// The calls under way, shared by every clone.
    pub(crate) in_flight: super::flight::CallsInFlight,
}

impl<S> Clone for Tools<S> {
    fn clone(&self) -> Self {
        Tools {
            dispatcher: self.dispatcher.clone(),
            namespace: self.namespace.clone(),
            unkeyed: self.unkeyed,
            unkeyed_by_tool: self.unkeyed_by_tool.clone(),
            principal: self.principal.clone(),
            approvers: self.approvers.clone(),
            default_approver: self.default_approver,
            states: self.states.clone(),
            definitions: self.definitions.clone(),
            keyed: self.keyed.clone(),
            repeat: self.repeat.clone(),
            by_name: self.by_name.clone(),
            tasks_after: self.tasks_after,
            in_flight: self.in_flight.clone(),
        }
    }
}

/// How long a keyed call runs before a client that takes tasks is answered
/// with one, unless the server says otherwise: long enough that most calls
/// answer in the request, short enough that no client's request timeout
/// (a minute in the official SDKs) is near.
pub(crate) const DEFAULT_TASKS_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// A `tools/call` request, as the server and the router fragments get it.
pub(crate) struct Request<'a> {
    pub(crate) name: &'a str,
    pub(crate) arguments: Option<JsonObject>,
    pub(crate) meta: &'a JsonObject,
    pub(crate) input_responses: Option<InputResponses>,
    pub(crate) request_state: Option<String>,
}

impl<S: Send + Sync + 'static> Tools<S> {
    pub(crate) fn new(dispatcher: Dispatcher<S>) -> Self {
        let mut tools = Tools {
            dispatcher,
            namespace: None,
            unkeyed: Unkeyed::default(),
            unkeyed_by_tool: HashMap::new(),
            principal: None,
            approvers: HashMap::new(),
            default_approver: Approver::default(),
            states: States::random(),
            definitions: Vec::new(),
            keyed: Vec::new(),
            repeat: Vec::new(),
            by_name: HashMap::new(),
            tasks_after: Some(DEFAULT_TASKS_AFTER),
            in_flight: Default::default(),
        };
        tools.define();
        tools
    }

    /// The definitions under the current policy.
    pub(crate) fn define(&mut self) {
        self.definitions.clear();
        self.keyed.clear();
        self.repeat.clear();
        for tool in self.dispatcher.registry().iter() {
            let policy = self.unkeyed_by_tool.get(tool.spec().name);
            let policy = policy.copied().unwrap_or(self.unkeyed);
            let (definition, keyed) = super::tools::listed_definition(&**tool, policy);
            let repeat = definition
                .meta
                .as_ref()
                .is_some_and(|m| m.contains_key(super::meta::REPEAT_ARGUMENT_META));
            self.definitions.push(definition);
            self.keyed.push(keyed);
            self.repeat.push(repeat);
        }
        self.by_name = self
            .definitions
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.to_string(), i))
            .collect();
    }

    /// The definition of the tool called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|&i| &self.definitions[i])
    }

    /// Run one call.
    ///
    /// An unknown tool is the only protocol error (JSON-RPC "invalid
    /// params", as MCP asks); everything else that stops a call (a missing
    /// or malformed key, invalid arguments, a refusal, an unknown outcome,
    /// a tool's own failure) is a tool error result the model can read.
    ///
    /// The call runs in its `tools/call {tool}` span (see `trace.rs`), the
    /// parent of the tool's `execute_tool` span.
    pub(crate) async fn call(
        &self,
        request: Request<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let entry = self.enter(request.name, context)?;
        let span = trace::call_span(request.name, context, request.meta);
        let response = super::flight::counted(entry.clone(), self.call_in_span(request, context))
            .instrument(span.clone())
            .await;
        // In the call's span, whose fields the line carries.
        span.in_scope(|| access::log(&entry, &response));
        trace::record_response(&span, &response);
        response
    }

    /// The call in its span: an unknown tool is refused as a protocol
    /// error; from there on, whatever stops the call is an answer the
    /// model reads ([`Self::run_call`]).
    async fn call_in_span(
        &self,
        request: Request<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name;
        let Some(&index) = self.by_name.get(name) else {
            return Err(self.unknown_tool(name));
        };
        Ok(match self.run_call(index, request, context).await {
            Ok(answer) | Err(answer) => answer,
        })
    }

    /// The call of the tool at `index`, from its request to its answer:
    /// prepared, dispatched, approved when it waits for a person, and
    /// answered for a model. `Err` is the answer of a call that stops
    /// before its result: a refusal, a question for the chat, a task.
    async fn run_call(
        &self,
        index: usize,
        request: Request<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, CallToolResponse> {
        let prepared = self.prepare(index, request, context).await?;
        let mut result = match self.task_after(index, context) {
            Some(after) => self.dispatch_or_task(&prepared, after, context).await?,
            None => self.dispatch_prepared(&prepared, context).await?,
        };
        // A decision made in this request (asked of the person in the chat)
        // is this call's own answer, not an earlier call's.
        let decided_here = awaiting_approval(&result).is_some();
        if let Some(key) = awaiting_approval(&result) {
            result = self
                .approve_in_chat(index, &key, result, &prepared, context)
                .await?;
            self.task_while_pending(&key, &result, &prepared, context)
                .await?;
        }
        // A duplicate of a key a program sent is its retry, answered exactly
        // as the first time; one of a chat is a model's repeat, and is told
        // so.
        let tell = !prepared.explicit;
        let definition = &self.definitions[index];
        let answer = self.answer(&result, definition, self.hints(index), tell, decided_here);
        Ok(answer.await.into())
    }

    /// The call `request` asks for, keyed and namespaced, with what an
    /// approval of it is bound to; or its refusal, in this order: unusable
    /// key fields, a malformed repeat count, a caller whose identity cannot
    /// name a namespace, an approval answer that does not fit the call.
    async fn prepare(
        &self,
        index: usize,
        mut request: Request<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Prepared, CallToolResponse> {
        let name = request.name;
        let keying = keying_of(name, request.meta, context)?;
        let reason =
            super::meta::reason(request.meta).map_err(|problem| bad_key_fields(name, &problem))?;
        let mut arguments = request.arguments.take().unwrap_or_default();
        let repeat = self.repeat_count(index, name, &mut arguments)?;
        let principal = self.principal.as_ref().and_then(|f| f(context));
        let namespace = self
            .namespace_for(principal.as_deref())
            .map_err(|problem| bad_key_fields(name, &problem))?;
        let fingerprint = fingerprint(&arguments);
        self.take_earlier_answer(&request, &fingerprint, principal.as_deref(), context)
            .await?;
        let mut prepared = Prepared {
            call: ToolCall {
                id: None,
                name: name.to_owned(),
                arguments: Arguments::Json(Value::Object(arguments)),
            },
            run: {
                let mut run = RunContext::default().namespace(namespace);
                run.reason = reason;
                // Who asked, as authenticated, for the approval rules.
                run.principal = principal.clone();
                run
            },
            fingerprint,
            principal,
            explicit: keying.is_keyed() && keying.client.is_none(),
        };
        self.key_call(index, keying, repeat, &mut prepared);
        Ok(prepared)
    }

    /// Which deliberate repeat the call is ([`REPEAT_ARGUMENT`], taken out
    /// of the arguments: 1 for a second time, 2 for a third): 0 when the
    /// tool has no such argument or the call does not give it; refused
    /// when it is not a whole number.
    fn repeat_count(
        &self,
        index: usize,
        name: &str,
        arguments: &mut JsonObject,
    ) -> Result<u32, CallToolResponse> {
        if !self.repeat[index] {
            return Ok(0);
        }
        match arguments.remove(REPEAT_ARGUMENT) {
            None | Some(Value::Null) => Ok(0),
            Some(value) => match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Ok(n),
                None => Err(bad_repeat(name, &value)),
            },
        }
    }

    /// Record the answer to an approval question asked in an earlier round,
    /// when the request comes back with one; refused when it does not fit
    /// this call (the call still waits).
    async fn take_earlier_answer(
        &self,
        request: &Request<'_>,
        fingerprint: &str,
        principal: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), CallToolResponse> {
        let Some(state) = &request.request_state else {
            return Ok(());
        };
        let name = request.name;
        let responses = request.input_responses.as_ref();
        self.take_answer(state, responses, fingerprint, principal, name, context)
            .await
            .map_err(|problem| {
                refused(
                    format!(
                        "`{name}` was not run: {problem}. Nothing ran, and the call still \
                         waits for a person's approval. Tell the user."
                    ),
                    ErrorCode::ApprovalPending,
                    &problem,
                )
            })
    }

    /// Key `prepared` as its tool is keyed ([`Keyed`]). A key of idem's is
    /// used exactly; a chat client's ids key a call unless a window does
    /// (see `Unkeyed::Window`).
    fn key_call(&self, index: usize, keying: Keying, repeat: u32, prepared: &mut Prepared) {
        let (call, run) = (&mut prepared.call, &mut prepared.run);
        match self.keyed[index] {
            Keyed::Window(within) if !prepared.explicit => {
                run.repeat_window = Some(RepeatWindow::new(within).repeat(repeat));
            }
            _ => {
                call.id = keying.call_id;
                if let Some((run_id, step)) = keying.run {
                    run.run_id = Some(run_id);
                    run.step = step;
                }
            }
        }
    }

    /// Dispatch the prepared call ([`Self::dispatch`]); it may be
    /// dispatched twice, before and after an approval in the chat.
    async fn dispatch_prepared(
        &self,
        prepared: &Prepared,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolResult, CallToolResult> {
        let (call, run) = (prepared.call.clone(), prepared.run.clone());
        self.dispatch(call, run, context).await
    }

    /// Ask the person in the chat about the call awaiting approval under
    /// `key`, when the chat is where its tool is approved, and dispatch it
    /// again once they answered. `Err` is the question, when it is asked
    /// in the answer (to come back in a later round).
    async fn approve_in_chat(
        &self,
        index: usize,
        key: &IdempotencyKey,
        pending: ToolResult,
        prepared: &Prepared,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolResult, CallToolResponse> {
        let definition = &self.definitions[index];
        if !self.approver(&definition.name).asks_in_chat() {
            return Ok(pending);
        }
        let principal = prepared.principal.as_deref();
        let asked = self.ask_in_chat(definition, key, &prepared.fingerprint, principal, context);
        match asked.await {
            Asked::Later(question) => Err(question.into()),
            Asked::Answered => Ok(self.dispatch_prepared(prepared, context).await?),
            Asked::Pending => Ok(pending),
        }
    }

    /// Still waiting for a person: a client that takes tasks gets one
    /// (`Err`), which completes when the approval lands.
    async fn task_while_pending(
        &self,
        key: &IdempotencyKey,
        result: &ToolResult,
        prepared: &Prepared,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), CallToolResponse> {
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !takes_tasks || result.result.is_ok() {
            return Ok(());
        }
        let principal = prepared.principal.as_deref();
        match self
            .task_for(key, &prepared.call, &prepared.run, principal)
            .await
        {
            Some(task) => Err(task.into()),
            None => Ok(()),
        }
    }

    /// What the answer to a call of the tool at `index` may tell the model
    /// it can do.
    fn hints(&self, index: usize) -> Hints<'static> {
        Hints {
            repeat_argument: self.repeat[index].then_some(REPEAT_ARGUMENT),
            read: self.keyed[index] == Keyed::Not,
        }
    }

    /// Run `call` on a task of its own, where [`request_progress`] tells
    /// where its request's progress goes.
    ///
    /// Once it has claimed its key, dropping it would leave the record in
    /// flight until its lease ran out, and a non-idempotent write would
    /// then be an unknown outcome forever; a task that nobody awaits
    /// finishes and records instead. So the request may go away (a
    /// `notifications/cancelled`, an HTTP client hanging up, a server
    /// dropping its handler future) and the call still completes; a retry
    /// gets its result.
    async fn dispatch(
        &self,
        call: ToolCall,
        run: RunContext,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolResult, CallToolResult> {
        let name = call.name.clone();
        let mut running = self.spawn(call, run, context, None);
        tokio::select! {
            biased;
            joined = &mut running => joined.map_err(|e| panicked(&name, e)),
            () = context.ct.cancelled() => Err(cancelled(&name)),
        }
    }

    /// The call on a task of its own ([`Self::dispatch`]), in the request's
    /// span (the tool's span is its child); with `claimed`, where its key
    /// is left once it has one.
    fn spawn(
        &self,
        call: ToolCall,
        run: RunContext,
        context: &RequestContext<RoleServer>,
        claimed: Option<idem_runtime::ClaimedKey>,
    ) -> tokio::task::JoinHandle<ToolResult> {
        let dispatcher = self.dispatcher.clone();
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| (token, context.peer.clone()));
        // Counted until the dispatch ends, after the request if need be.
        let entry = super::flight::keyed(&call, &run);
        let call = async move {
            let _entry = entry;
            let dispatched = dispatcher.dispatch_one(call, &run);
            match claimed {
                Some(claimed) => claimed.scope(dispatched).await,
                None => dispatched.await,
            }
        };
        tokio::spawn(REQUEST_PROGRESS.scope(progress, call).in_current_span())
    }

    /// Who decides `tool`'s approvals.
    fn approver(&self, tool: &str) -> Approver {
        self.approvers
            .get(tool)
            .copied()
            .unwrap_or(self.default_approver)
    }

    /// The namespace of a call by `principal`: the server's (or the
    /// executor's), then `/` and the principal.
    fn namespace_for(&self, principal: Option<&str>) -> Result<Namespace, String> {
        let base = self
            .namespace
            .clone()
            .unwrap_or_else(|| self.dispatcher.executor().default_namespace().clone());
        match principal {
            None => Ok(base),
            Some(principal) => Namespace::new(format!("{}/{principal}", base.as_str()))
                .map_err(|e| format!("the caller's identity cannot name a namespace ({e})")),
        }
    }

    fn unknown_tool(&self, name: &str) -> ErrorData {
        let suggestion = self.dispatcher.registry().suggest(name);
        let mut data = json!({ "code": ErrorCode::UnknownTool });
        if let Some(suggestion) = suggestion {
            data["suggestion"] = json!(suggestion);
        }
        let error = IdemError::UnknownTool {
            name: name.to_owned(),
            suggestion: suggestion.map(str::to_owned),
        };
        ErrorData::invalid_params(error.to_string(), Some(data))
    }

    /// The MCP shape of a dispatched call's result, written for a model;
    /// a duplicate's starts with a sentence saying it was already done
    /// when `tell`. `decided_here`: the request itself waited for the
    /// decision its result carries, so it is not marked deduplicated.
    async fn answer(
        &self,
        result: &ToolResult,
        definition: &Tool,
        hints: Hints<'_>,
        tell: bool,
        decided_here: bool,
    ) -> CallToolResult {
        let structured = definition.output_schema.is_some();
        let called = match &result.result {
            Ok(called) => called,
            Err(e) => {
                let content = result.content();
                return error_result(
                    answer::error(&definition.name, e, hints),
                    content["error"].clone(),
                    result.deduplicated() && !decided_here,
                    e.key().map(|k| k.as_str()),
                );
            }
        };
        let key = called.meta.key.as_ref();
        let mut answer = if structured {
            CallToolResult::structured(called.output.clone())
        } else {
            CallToolResult::success(vec![ContentBlock::text(answer::plain(&called.output))])
        };
        if called.meta.deduplicated && tell {
            let (at, now) = self.recorded_at(key).await;
            let said = answer::already_done(&definition.name, at, now, hints);
            answer.content.insert(0, ContentBlock::text(said));
        }
        // First: whatever else is said, other arguments ran than the
        // model sent.
        if let Some(edit) = &called.meta.edited {
            let said = answer::edited(&definition.name, &edit.by, &edit.arguments);
            answer.content.insert(0, ContentBlock::text(said));
        }
        answer.with_meta(Some(result_meta(
            called.meta.deduplicated,
            key.map(IdempotencyKey::as_str),
        )))
    }

    /// When the record under `key` was created, and the store's time now.
    async fn recorded_at(&self, key: Option<&IdempotencyKey>) -> (Option<u64>, u64) {
        let store = self.dispatcher.executor().store();
        let now = store.now().await.map_or(0, |t| t.as_millis());
        let Some(key) = key else {
            return (None, now);
        };
        let at = store
            .get(key)
            .await
            .ok()
            .flatten()
            .map(|record| record.created_at.as_millis());
        (at, now)
    }
}

/// One call as it is dispatched, with what an approval of it is bound to.
struct Prepared {
    /// The call, keyed.
    call: ToolCall,
    /// Its namespace, and its run or repeat window.
    run: RunContext,
    /// Of the arguments as sent, which an approval question is bound to.
    fingerprint: String,
    /// Who is calling ([`PrincipalFn`]).
    principal: Option<String>,
    /// Keyed by a key of idem's, not by a chat client's own ids: a
    /// duplicate is then a program's retry, not a model's repeat.
    explicit: bool,
}

/// What the call is keyed by ([`key::keying`]), from its `_meta` and the
/// HTTP request it came in; refused when those fields are unusable.
fn keying_of(
    name: &str,
    meta: &JsonObject,
    context: &RequestContext<RoleServer>,
) -> Result<Keying, CallToolResponse> {
    let parts = context.extensions.get::<http::request::Parts>();
    key::keying(meta, parts).map_err(|problem| bad_key_fields(name, &problem))
}

/// The fingerprint of the arguments as sent, which an approval question
/// is bound to (empty when they cannot be canonicalized).
fn fingerprint(arguments: &JsonObject) -> String {
    CanonicalArgs::from_value(&Value::Object(arguments.clone()))
        .map(|a| a.fingerprint.as_str().to_owned())
        .unwrap_or_default()
}

/// The key of the call a result says awaits a person's approval.
fn awaiting_approval(result: &ToolResult) -> Option<IdempotencyKey> {
    match &result.result {
        Err(IdemError::ApprovalPending { key, .. }) => Some(key.clone()),
        _ => None,
    }
}
