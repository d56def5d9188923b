//! A Responses API answer and its output items: the items are kept
//! verbatim, to go back with the turn, and read through a typed view.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;

use super::super::stream::{Lenient, view};
use super::super::{
    AnswerError, AssistantToolCall, ModelError, ModelErrorKind, ModelResponse, Usage,
};

/// A whole answer, and the response a stream completes with.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Response {
    status: Lenient<String>,
    /// The failure a `failed` response reports, quoted as it came.
    error: Value,
    /// The output items, verbatim.
    pub(super) output: Lenient<Vec<Value>>,
    incomplete_details: Lenient<Incomplete>,
    usage: Lenient<ResponsesUsage>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct Incomplete {
    reason: Lenient<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ResponsesUsage {
    input_tokens: Lenient<u64>,
    output_tokens: Lenient<u64>,
}

impl Response {
    /// A response with what it says of itself: why generation stopped (the
    /// incomplete reason, or the status) and the token counts; its items
    /// are for [`take_items`].
    pub(super) fn head(&self) -> ModelResponse {
        let usage = self.usage.0.as_ref();
        ModelResponse {
            stop_reason: self
                .incomplete_details
                .0
                .as_ref()
                .and_then(|details| details.reason.0.clone())
                .or_else(|| self.status.0.clone()),
            usage: Usage {
                input_tokens: usage.map_or(0, |u| u.input_tokens.count()),
                output_tokens: usage.map_or(0, |u| u.output_tokens.count()),
            },
            ..ModelResponse::default()
        }
    }
}

/// The response a whole answer holds.
pub(super) fn answer(response: Response) -> Result<ModelResponse, AnswerError> {
    if response.status.0.as_deref() == Some("failed") {
        return Err(failure(&response.error).into());
    }
    let mut answer = response.head();
    let output = response
        .output
        .0
        .ok_or(AnswerError::Lacks("output items"))?;
    take_items(&mut answer, output, true)?;
    Ok(answer)
}

/// The kind of a failure, from its `code`.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct Failure {
    code: Lenient<String>,
}

/// The failure a `failed` response or an `error` event reports: an
/// overload when its code says so.
pub(super) fn failure(error: &Value) -> ModelError {
    let kind = match view::<Failure>(error).code.0.as_deref() {
        Some("server_error" | "rate_limit_exceeded" | "server_is_overloaded") => {
            ModelErrorKind::Overloaded
        }
        _ => ModelErrorKind::Protocol,
    };
    ModelError::new(
        kind,
        format!(
            "the model endpoint failed: {}",
            super::super::excerpt(&error.to_string())
        ),
    )
}

/// The most output items one answer may have: far more than a turn uses
/// (the loop runs a few calls a turn). With the 32 MiB bound on the answer,
/// it bounds what one answer can add to the conversation, item by item.
pub(super) const MAX_OUTPUT_ITEMS: usize = 1024;

/// What kind of output item an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ItemKind {
    Reasoning,
    Message,
    FunctionCall,
    /// A kind the loop does not use (a web search, an image …).
    #[serde(other)]
    Other,
}

/// What the loop reads of an output item kept verbatim.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ItemView {
    /// Its kind; none when its `type` is no string (no item at all).
    #[serde(rename = "type")]
    pub(super) kind: Lenient<ItemKind>,
    pub(super) id: Lenient<String>,
    pub(super) call_id: Lenient<String>,
    name: Lenient<String>,
    /// A call's arguments: most servers send text, some the object.
    pub(super) arguments: Option<Value>,
    content: Lenient<Vec<Lenient<Part>>>,
}

/// A part of a message item.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    OutputText(TextPart),
    Refusal(RefusalPart),
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TextPart {
    text: Lenient<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RefusalPart {
    refusal: Lenient<String>,
}

impl ItemView {
    pub(super) fn is(&self, kind: ItemKind) -> bool {
        self.kind.0 == Some(kind)
    }

    /// Whether the loop keeps the item and sends it back: the kinds a model
    /// with function tools answers with. Anything else (an unknown kind, a
    /// value that is not an item) is nothing the next request could use.
    fn kept(&self) -> bool {
        matches!(
            self.kind.0,
            Some(ItemKind::Reasoning | ItemKind::Message | ItemKind::FunctionCall)
        )
    }

    /// A call's `call_id`, if it has a usable one.
    fn usable_call_id(&self) -> Option<&str> {
        self.call_id.non_empty()
    }

    /// Whether a message holds text or a refusal.
    pub(super) fn has_text(&self) -> bool {
        self.parts()
            .any(|part| matches!(part, Part::OutputText(_) | Part::Refusal(_)))
    }

    /// A message's text and refusals, in order.
    fn text(&self) -> String {
        self.parts()
            .map(|part| match part {
                Part::OutputText(part) => part.text.or_empty(),
                Part::Refusal(part) => part.refusal.or_empty(),
                Part::Other => "",
            })
            .collect()
    }

    fn parts(&self) -> impl Iterator<Item = &Part> {
        self.content
            .0
            .iter()
            .flatten()
            .filter_map(|part| part.0.as_ref())
    }

    /// A call's arguments as the model wrote them.
    fn arguments_text(&self) -> String {
        match &self.arguments {
            Some(Value::String(text)) => text.clone(),
            None => String::new(),
            Some(other) => other.to_string(),
        }
    }
}

/// An output item kept, verbatim, with its view.
struct Kept {
    item: Value,
    view: ItemView,
}

/// Read the output items, in order, into `answer`: the text (from
/// message items when `with_text`: a stream's text came as deltas), the
/// function calls, and every item verbatim to go back with the turn.
///
/// An item repeated (same id, or a call with the same `call_id`) keeps
/// its first place, so whatever came before it (its reasoning) still
/// does, and its last version (a stream's `done` after its `added`). A call
/// without a `call_id` gets a random one, written into its item too, so its
/// output pairs with it in this turn and is unlike any other turn's.
///
/// # Errors
///
/// More than [`MAX_OUTPUT_ITEMS`] items, or two calls left with one
/// `call_id` (items that contradict each other): each call must get exactly
/// one answer.
pub(super) fn take_items(
    answer: &mut ModelResponse,
    items: Vec<Value>,
    with_text: bool,
) -> Result<(), ModelError> {
    if items.len() > MAX_OUTPUT_ITEMS {
        return Err(ModelError::protocol(format!(
            "the answer has {} output items, more than the {MAX_OUTPUT_ITEMS} a turn may have",
            items.len()
        )));
    }
    let kept = unique(items);
    let mut answered = HashSet::new();
    for Kept { view, .. } in &kept {
        if view.is(ItemKind::Message) && with_text {
            answer.content.push_str(&view.text());
        } else if view.is(ItemKind::FunctionCall) {
            let id = view.call_id.or_empty();
            if !answered.insert(id) {
                return Err(ModelError::protocol(format!(
                    "the answer's output items contradict each other: two calls have the call_id {}",
                    super::super::excerpt(id)
                )));
            }
            answer.tool_calls.push(AssistantToolCall {
                id: id.to_owned(),
                name: view.name.or_empty().to_owned(),
                arguments: view.arguments_text(),
            });
        }
    }
    answer.provider_items = kept.into_iter().map(|kept| kept.item).collect();
    Ok(())
}

/// The items the loop keeps, each once: in the place it first had, as it
/// last came; calls without a `call_id` given one.
fn unique(items: Vec<Value>) -> Vec<Kept> {
    let items: Vec<Kept> = items
        .into_iter()
        .map(|item| Kept {
            view: view(&item),
            item,
        })
        .filter(|kept| kept.view.kept())
        .collect();
    let mut call_ids: HashSet<String> = items
        .iter()
        .filter(|kept| kept.view.is(ItemKind::FunctionCall))
        .filter_map(|kept| kept.view.usable_call_id().map(str::to_owned))
        .collect();
    let mut unique: Vec<Kept> = Vec::with_capacity(items.len());
    // Where an item id, or a call's call id, already has its place.
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut by_call: HashMap<String, usize> = HashMap::new();
    for mut kept in items {
        let is_call = kept.view.is(ItemKind::FunctionCall);
        if is_call && kept.view.usable_call_id().is_none() {
            let id = unused_call_id(&mut call_ids);
            if let Value::Object(fields) = &mut kept.item {
                fields.insert("call_id".to_owned(), Value::String(id.clone()));
            }
            kept.view.call_id = Lenient(Some(id));
        }
        let id = kept.view.id.non_empty().map(str::to_owned);
        let call = kept
            .view
            .usable_call_id()
            .filter(|_| is_call)
            .map(str::to_owned);
        let known = id.as_ref().and_then(|id| by_id.get(id));
        let place = match known.or_else(|| call.as_ref().and_then(|c| by_call.get(c))) {
            Some(&place) => {
                unique[place] = kept;
                place
            }
            None => {
                unique.push(kept);
                unique.len() - 1
            }
        };
        if let Some(id) = id {
            by_id.insert(id, place);
        }
        if let Some(call) = call {
            by_call.insert(call, place);
        }
    }
    unique
}

/// A `call_id` for a call the server gave none, unlike any in `taken`.
/// Random, not made from the item id: servers that leave out call ids
/// often number their items afresh each turn, and a call id must be unlike
/// every earlier turn's too.
fn unused_call_id(taken: &mut HashSet<String>) -> String {
    loop {
        let id = format!("call_toolhost_{:016x}", fastrand::u64(..));
        if taken.insert(id.clone()) {
            return id;
        }
    }
}
