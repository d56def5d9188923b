//! A streamed Responses API answer: its events, the output items they
//! build, and the completed response that ends it.

use std::collections::HashMap;
use std::ops::ControlFlow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::stream::{Lenient, view};
use super::super::{ModelError, ModelResponse, StreamedAnswer, sse};
use super::items::{self, ItemKind, ItemView, MAX_OUTPUT_ITEMS, Response};

/// One event of a streamed answer.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum Event {
    /// A piece of a message's text.
    #[serde(rename = "response.output_text.delta")]
    TextDelta(Delta),
    /// A piece of a message's refusal.
    #[serde(rename = "response.refusal.delta")]
    RefusalDelta(Delta),
    /// An output item begins, or is done.
    #[serde(
        rename = "response.output_item.added",
        alias = "response.output_item.done"
    )]
    Item(ItemEvent),
    /// A piece of a call's arguments.
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta(Delta),
    /// A call's arguments, whole.
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone(ArgumentsDone),
    /// The response is complete, or stopped short of it.
    #[serde(rename = "response.completed", alias = "response.incomplete")]
    Completed(Completed),
    /// The response failed.
    #[serde(rename = "response.failed")]
    Failed(Failed),
    /// The stream failed: the failure is the event's `error`, or the event.
    #[serde(rename = "error")]
    Error(Map<String, Value>),
    /// `response.created`, `in_progress`, `content_part.*`,
    /// `output_text.done` and whatever comes new: nothing to read.
    #[serde(other)]
    Other,
}

/// A piece of an item's text, refusal or arguments.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Delta {
    item_id: Lenient<String>,
    output_index: Lenient<u64>,
    delta: Lenient<String>,
}

/// An output item, as added or done.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct ItemEvent {
    output_index: Lenient<u64>,
    /// The item, verbatim.
    item: Value,
}

/// A call's arguments, whole.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct ArgumentsDone {
    item_id: Lenient<String>,
    output_index: Lenient<u64>,
    arguments: Lenient<String>,
}

/// The completed response.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Completed {
    response: Lenient<Map<String, Value>>,
}

/// The failed response.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Failed {
    response: Lenient<FailedResponse>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct FailedResponse {
    error: Value,
}

/// The output items a stream built, and the response it completed with.
#[derive(Debug, Default)]
pub struct Reader {
    slots: Slots,
    finished: Option<Response>,
}

/// Take in one event.
pub(super) fn read(
    reader: &mut Reader,
    event: Event,
    answer: &mut StreamedAnswer<'_>,
) -> Result<ControlFlow<()>, ModelError> {
    let slots = &mut reader.slots;
    match event {
        Event::TextDelta(delta) | Event::RefusalDelta(delta)
            if delta.delta.non_empty().is_none() => {}
        Event::TextDelta(delta) => {
            answer.text(delta.delta.or_empty());
            if let Some(slot) = slots.find(&delta) {
                slot.text.push_str(delta.delta.or_empty());
            }
        }
        Event::RefusalDelta(delta) => {
            answer.text(delta.delta.or_empty());
            if let Some(slot) = slots.find(&delta) {
                slot.refusal.push_str(delta.delta.or_empty());
            }
        }
        Event::Item(event) => slots.put(event.item, event.output_index.0)?,
        Event::ArgumentsDelta(delta) => {
            if let Some(slot) = slots.find(&delta) {
                slot.arguments.push_str(delta.delta.or_empty());
            }
        }
        Event::ArgumentsDone(done) => {
            let slot = slots.slot(done.item_id.0.as_deref(), done.output_index.0);
            if let (Some(slot), Some(arguments)) = (slot, done.arguments.0) {
                slot.arguments = arguments;
            }
        }
        Event::Completed(completed) => {
            let Some(response) = completed.response.0 else {
                return Err(ModelError::protocol(
                    "the stream ended with a completion event that holds no response",
                ));
            };
            reader.finished =
                Some(Response::deserialize(Value::Object(response)).unwrap_or_default());
            return Ok(ControlFlow::Break(()));
        }
        Event::Failed(failed) => {
            let error = failed.response.0.map(|r| r.error).unwrap_or_default();
            return Err(items::failure(&error));
        }
        Event::Error(mut fields) => {
            return Err(match fields.get("error") {
                Some(error @ Value::Object(_)) => items::failure(error),
                _ => {
                    fields.insert("type".to_owned(), Value::from("error"));
                    items::failure(&Value::Object(fields))
                }
            });
        }
        Event::Other => {}
    }
    Ok(ControlFlow::Continue(()))
}

/// The answer: the completed response's own output items when it has
/// any, which win over what the events built (text included, unless they
/// hold none and the deltas did); else the items the events built, with
/// the text the deltas brought. What was shown as it came ends as the
/// answer reads.
pub(super) fn finish(
    reader: Reader,
    answer: StreamedAnswer<'_>,
) -> Result<ModelResponse, ModelError> {
    let Some(response) = reader.finished else {
        return Err(sse::cut());
    };
    let streamed = answer.text_so_far();
    let mut out = response.head();
    match response.output.0 {
        Some(output) if !output.is_empty() => {
            items::take_items(&mut out, output, true)?;
            if out.content.is_empty() && !streamed.is_empty() {
                streamed.clone_into(&mut out.content);
                // Its message item goes back as the text: give it the text.
                let message = out
                    .provider_items
                    .iter_mut()
                    .find(|item| view::<ItemView>(item).is(ItemKind::Message));
                if let Some(Value::Object(message)) = message {
                    message.insert(
                        "content".to_owned(),
                        json!([{"type": "output_text", "text": streamed, "annotations": []}]),
                    );
                }
            }
        }
        _ => {
            items::take_items(&mut out, reader.slots.into_items(), streamed.is_empty())?;
            if !streamed.is_empty() {
                streamed.clone_into(&mut out.content);
            }
        }
    }
    answer.settle_text(&out.content);
    Ok(out)
}

/// One output item as it streams in.
#[derive(Debug)]
struct Slot {
    /// Its position in the output, when the server said.
    index: Option<u64>,
    /// The item: as added, then as done.
    item: Value,
    /// What the loop reads of it.
    view: ItemView,
    /// A function call's arguments so far.
    arguments: String,
    /// A message's text and refusal so far, from their deltas: what the
    /// message holds if its `done` never comes.
    text: String,
    refusal: String,
}

impl Slot {
    /// The item, with what its deltas brought when its last version does
    /// not hold it.
    fn into_item(self) -> Value {
        let mut item = self.item;
        let Value::Object(fields) = &mut item else {
            return item;
        };
        if self.view.is(ItemKind::FunctionCall) {
            fields.insert("arguments".to_owned(), Value::String(self.arguments));
        } else if self.view.is(ItemKind::Message) {
            let streamed = !self.text.is_empty() || !self.refusal.is_empty();
            if streamed && !self.view.has_text() {
                let mut parts = Vec::new();
                if !self.text.is_empty() {
                    parts
                        .push(json!({"type": "output_text", "text": self.text, "annotations": []}));
                }
                if !self.refusal.is_empty() {
                    parts.push(json!({"type": "refusal", "refusal": self.refusal}));
                }
                fields.insert("content".to_owned(), Value::Array(parts));
            }
        }
        item
    }
}

/// The output items of a stream, found by item id or by position.
#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    by_id: HashMap<String, usize>,
    by_index: HashMap<u64, usize>,
}

impl Slots {
    /// Where the item an event is about is: by its item id, else by its
    /// position — unless the item there has another id.
    fn place(&self, item_id: Option<&str>, index: Option<u64>) -> Option<usize> {
        let item_id = item_id.filter(|id| !id.is_empty());
        if let Some(&at) = item_id.and_then(|id| self.by_id.get(id)) {
            return Some(at);
        }
        let at = *self.by_index.get(&index?)?;
        match (item_id, self.slots[at].view.id.non_empty()) {
            (Some(wanted), Some(there)) if wanted != there => None,
            _ => Some(at),
        }
    }

    fn slot(&mut self, item_id: Option<&str>, index: Option<u64>) -> Option<&mut Slot> {
        let at = self.place(item_id, index)?;
        self.slots.get_mut(at)
    }

    /// The slot of the item `delta` is a piece of.
    fn find(&mut self, delta: &Delta) -> Option<&mut Slot> {
        self.slot(delta.item_id.0.as_deref(), delta.output_index.0)
    }

    /// Add `item` (from `output_item.added`), or update the slot it
    /// already has (from `output_item.done`). What is not an item is
    /// passed over.
    fn put(&mut self, item: Value, index: Option<u64>) -> Result<(), ModelError> {
        let view: ItemView = view(&item);
        if view.kind.0.is_none() {
            return Ok(());
        }
        let id = view.id.non_empty().map(str::to_owned);
        let arguments = view
            .arguments
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_owned);
        // A position to find the slot by: its first one, never a second
        // that another item may hold.
        let mut new_index = index;
        let at = match self.place(id.as_deref(), index) {
            Some(at) => {
                let slot = &mut self.slots[at];
                slot.item = item;
                slot.view = view;
                if let Some(arguments) = arguments {
                    slot.arguments = arguments;
                }
                if slot.index.is_none() {
                    slot.index = index;
                } else {
                    new_index = None;
                }
                at
            }
            None => {
                if self.slots.len() == MAX_OUTPUT_ITEMS {
                    return Err(ModelError::protocol(format!(
                        "the answer has more than the {MAX_OUTPUT_ITEMS} output items a turn may have"
                    )));
                }
                self.slots.push(Slot {
                    index,
                    item,
                    view,
                    arguments: arguments.unwrap_or_default(),
                    text: String::new(),
                    refusal: String::new(),
                });
                self.slots.len() - 1
            }
        };
        if let Some(id) = id {
            self.by_id.entry(id).or_insert(at);
        }
        if let Some(index) = new_index {
            self.by_index.entry(index).or_insert(at);
        }
        Ok(())
    }

    /// The items in output order (those without a position after the
    /// rest, in the order they came), each with what its deltas brought.
    fn into_items(mut self) -> Vec<Value> {
        self.slots
            .sort_by_key(|slot| slot.index.unwrap_or(u64::MAX));
        self.slots.into_iter().map(Slot::into_item).collect()
    }
}
