//! What every provider's answer reading shares: the reading of a stream's
//! events into a provider's event type, [`StreamedAnswer`] (the text and
//! tool calls a stream brings, piece by piece), and the lenient field types
//! the providers' wire types are made of.

use futures::StreamExt as _;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

use super::{
    AssistantToolCall, EventSink, ModelError, ModelEvent, ModelResponse, Usage, Wire, sse,
};

/// Read `response`'s events through `W` until it breaks off or the stream
/// ends: [`Wire::read_stream`], which every provider shares.
pub(crate) async fn read<W: Wire + ?Sized>(
    response: reqwest::Response,
    events: EventSink<'_>,
) -> Result<ModelResponse, ModelError> {
    let mut stream = std::pin::pin!(sse::events(response));
    let mut answer = StreamedAnswer::new(events);
    let mut reader = W::Reader::default();
    while let Some(event) = stream.next().await {
        let event = match decode::<W::Event>(event?)? {
            Data::Nothing => continue,
            Data::Done => {
                answer.done = true;
                break;
            }
            Data::Event(event) => event,
        };
        if W::read(&mut reader, event, &mut answer)?.is_break() {
            break;
        }
    }
    W::finish(reader, answer)
}

/// What one server-sent event holds.
enum Data<E> {
    /// No data: a keep-alive.
    Nothing,
    /// `[DONE]`, the end of the stream as OpenAI's APIs mark it.
    Done,
    /// An event.
    Event(E),
}

/// The data of `event` as an `E`. Data that is JSON but no object holds
/// nothing more than the event's name; an object without a `type` (or with
/// one that is no string) takes the event's name for it, as Anthropic's
/// events name themselves both ways.
fn decode<E: DeserializeOwned>(event: sse::Event) -> Result<Data<E>, ModelError> {
    let data = event.data.trim();
    if data.is_empty() {
        return Ok(Data::Nothing);
    }
    if data == "[DONE]" {
        return Ok(Data::Done);
    }
    let value: Value = serde_json::from_str(data).map_err(|e| {
        ModelError::protocol(format!(
            "a stream event is not JSON ({e}): {}",
            super::excerpt(data)
        ))
    })?;
    let mut fields = match value {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    if !fields.get("type").is_some_and(Value::is_string) {
        fields.insert("type".to_owned(), Value::String(event.name));
    }
    E::deserialize(Value::Object(fields))
        .map(Data::Event)
        .map_err(|e| {
            ModelError::protocol(format!(
                "a stream event does not read as one ({e}): {}",
                super::excerpt(data)
            ))
        })
}

/// A streamed answer as it comes in: its text, reported piece by piece as
/// it grows, and its tool calls, assembled from their pieces, with why it
/// stopped and what it cost. A provider's [`Wire::read`] feeds it one
/// event at a time; [`StreamedAnswer::finish`] makes it the response.
///
/// The answer is made of parts in the order they began (tool calls, and
/// for providers that number them all, other parts such as text blocks),
/// each at a position the endpoint gives, or none. A piece for a position
/// belongs to the latest part that began there; a piece without a position
/// to the latest part of all.
pub struct StreamedAnswer<'a> {
    events: EventSink<'a>,
    text: String,
    parts: Vec<Part>,
    /// Whether the stream said `[DONE]`.
    done: bool,
    /// Why generation stopped, as the endpoint says it.
    pub stop_reason: Option<String>,
    /// Token counts, as the endpoint reports them.
    pub usage: Usage,
}

impl std::fmt::Debug for StreamedAnswer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedAnswer")
            .field("text", &self.text)
            .field("parts", &self.parts)
            .field("done", &self.done)
            .field("stop_reason", &self.stop_reason)
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

/// One part of a streamed answer.
#[derive(Debug)]
struct Part {
    /// Its position, when the endpoint gave one.
    index: Option<u64>,
    /// What it is, when it is a tool call.
    call: Option<PartialCall>,
}

/// A tool call, as far as it came.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl<'a> StreamedAnswer<'a> {
    pub(crate) fn new(events: EventSink<'a>) -> Self {
        Self {
            events,
            text: String::new(),
            parts: Vec::new(),
            done: false,
            stop_reason: None,
            usage: Usage::default(),
        }
    }

    /// A piece of the answer's text: added to it, and reported at once. An
    /// empty piece is nothing.
    pub fn text(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        self.text.push_str(piece);
        (self.events)(ModelEvent::TextDelta(piece.to_owned()));
    }

    /// The text so far.
    #[must_use]
    pub fn text_so_far(&self) -> &str {
        &self.text
    }

    /// Whether the stream said `[DONE]`, the end OpenAI's APIs mark.
    #[must_use]
    pub fn said_done(&self) -> bool {
        self.done
    }

    /// How many parts have begun.
    #[must_use]
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// A part that is no tool call begins at `index` (a text block: its
    /// text comes through [`StreamedAnswer::text`]).
    pub fn start_part(&mut self, index: Option<u64>) {
        self.parts.push(Part { index, call: None });
    }

    /// A tool call begins at `index`, with its id (one is made up at the
    /// end if it has none) and name.
    pub fn start_call(&mut self, index: Option<u64>, id: Option<String>, name: String) {
        self.parts.push(Part {
            index,
            call: Some(PartialCall {
                id,
                name,
                arguments: String::new(),
            }),
        });
    }

    /// More of the arguments of the tool call at `index`; nothing when the
    /// part there is no call.
    pub fn arguments(&mut self, index: Option<u64>, piece: &str) {
        if let Some(call) = self.latest(index).and_then(|part| part.call.as_mut()) {
            call.arguments.push_str(piece);
        }
    }

    /// A piece of a tool call as chat completions stream them: the call
    /// with its id, when it has one (a new id is a new call, even at a
    /// position another call had: some servers number every call 0); else
    /// the latest call at its position. A call none of those find begins.
    /// Names come whole, but are joined in case a server splits them.
    pub fn call_piece(
        &mut self,
        index: Option<u64>,
        id: Option<&str>,
        name: &str,
        arguments: &str,
    ) {
        let id = id.filter(|id| !id.is_empty());
        let found = match id {
            Some(id) => self
                .parts
                .iter()
                .position(|part| part.call.as_ref().and_then(|c| c.id.as_deref()) == Some(id)),
            None => self.latest_at(index),
        };
        let at = found.unwrap_or_else(|| {
            self.start_call(index, id.map(str::to_owned), String::new());
            self.parts.len() - 1
        });
        if let Some(call) = self.parts[at].call.as_mut() {
            call.name.push_str(name);
            call.arguments.push_str(arguments);
        }
    }

    /// Where the latest part at `index` is (the latest of all without one).
    fn latest_at(&self, index: Option<u64>) -> Option<usize> {
        self.parts
            .iter()
            .rposition(|part| index.is_none() || part.index == index)
    }

    fn latest(&mut self, index: Option<u64>) -> Option<&mut Part> {
        let at = self.latest_at(index)?;
        self.parts.get_mut(at)
    }

    /// The answer's text ends as `text`: report the rest of it, when the
    /// pieces reported were its start (otherwise the answer stands, and the
    /// transcript has it).
    pub fn settle_text(&self, text: &str) {
        match text.strip_prefix(self.text.as_str()) {
            Some("") => {}
            Some(rest) => (self.events)(ModelEvent::TextDelta(rest.to_owned())),
            None => tracing::debug!(
                "the streamed text differs from the completed response's; the response's is kept"
            ),
        }
    }

    /// The response: the text, the tool calls in the order they began
    /// (those without an id get `call_0`, `call_1` … by that order), why
    /// generation stopped and the token counts.
    #[must_use]
    pub fn finish(self) -> ModelResponse {
        let tool_calls = self
            .parts
            .into_iter()
            .filter_map(|part| part.call)
            .enumerate()
            .map(|(i, call)| AssistantToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{i}")),
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        ModelResponse {
            content: self.text,
            tool_calls,
            stop_reason: self.stop_reason,
            usage: self.usage,
            provider_items: Vec::new(),
        }
    }
}

/// A field of a model's answer, read leniently: missing, `null`, or of
/// another type than `T`, it is absent. Endpoints differ in the details
/// they send (a count as a string, an id as a number), and none of those is
/// worth failing a turn for; what an answer must have, its provider checks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lenient<T>(pub(crate) Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(Self(T::deserialize(value).ok()))
    }
}

impl Lenient<String> {
    /// The text, or none when it is absent or empty.
    pub(crate) fn non_empty(&self) -> Option<&str> {
        self.0.as_deref().filter(|text| !text.is_empty())
    }

    /// The text, empty when absent.
    pub(crate) fn or_empty(&self) -> &str {
        self.0.as_deref().unwrap_or_default()
    }
}

impl Lenient<u64> {
    /// The count, 0 when absent.
    pub(crate) fn count(&self) -> u64 {
        self.0.unwrap_or(0)
    }
}

/// A tool call's arguments as the text the model wrote: most endpoints
/// send a JSON string, some the object itself; `null` or nothing is no
/// text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ArgumentsText(pub(crate) String);

impl<'de> Deserialize<'de> for ArgumentsText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self(match Value::deserialize(deserializer)? {
            Value::String(text) => text,
            Value::Null => String::new(),
            other => other.to_string(),
        }))
    }
}

/// A value `T` read from `value` without taking it: the typed view of an
/// item kept verbatim. What does not read as a `T` reads as its default.
pub(crate) fn view<T: DeserializeOwned + Default>(value: &Value) -> T {
    T::deserialize(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect<'a>(
        seen: &'a std::sync::Mutex<Vec<String>>,
    ) -> impl Fn(ModelEvent) + Send + Sync + 'a {
        move |event| {
            let ModelEvent::TextDelta(text) = event;
            seen.lock().unwrap().push(text);
        }
    }

    #[test]
    fn text_is_reported_as_it_comes_and_empty_pieces_are_nothing() {
        let seen = std::sync::Mutex::new(Vec::new());
        let sink = collect(&seen);
        let mut answer = StreamedAnswer::new(&sink);
        for piece in ["Hel", "", "lo"] {
            answer.text(piece);
        }
        answer.settle_text("Hello there");
        assert_eq!(answer.finish().content, "Hello");
        assert_eq!(*seen.lock().unwrap(), ["Hel", "lo", " there"]);
    }

    #[test]
    fn call_pieces_assemble_by_id_then_position() {
        let sink = |_| {};
        let mut answer = StreamedAnswer::new(&sink);
        answer.call_piece(Some(0), Some("a"), "calc", "{\"ex");
        answer.call_piece(Some(1), Some("b"), "echo", "");
        answer.call_piece(Some(0), None, "", "pression\":\"1\"}");
        answer.call_piece(Some(1), None, "", "{}");
        // A new id at a reused position is a new call.
        answer.call_piece(Some(0), Some("c"), "calc", "{}");
        // No id and a position never seen: a call of its own, named later.
        answer.call_piece(Some(7), None, "late", "");
        let calls = answer.finish().tool_calls;
        let read: Vec<(&str, &str, &str)> = calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            read,
            [
                ("a", "calc", "{\"expression\":\"1\"}"),
                ("b", "echo", "{}"),
                ("c", "calc", "{}"),
                ("call_3", "late", ""),
            ]
        );
    }

    #[test]
    fn arguments_go_to_the_call_at_their_position_and_never_to_another_part() {
        let sink = |_| {};
        let mut answer = StreamedAnswer::new(&sink);
        answer.start_call(Some(0), Some("t".into()), "calc".into());
        answer.start_part(Some(1));
        answer.arguments(Some(1), "lost");
        answer.arguments(None, "lost too");
        answer.arguments(Some(0), "{}");
        let calls = answer.finish().tool_calls;
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, "{}");
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Event {
        Stop,
        Text {
            #[serde(default)]
            text: Lenient<String>,
        },
        #[serde(other)]
        Other,
    }

    fn event(name: &str, data: &str) -> Result<Data<Event>, ModelError> {
        decode(sse::Event {
            name: name.into(),
            data: data.into(),
        })
    }

    fn decoded(name: &str, data: &str) -> Event {
        match event(name, data) {
            Ok(Data::Event(event)) => event,
            _ => panic!("{name} {data}: no event"),
        }
    }

    #[test]
    fn an_events_name_stands_for_a_type_its_data_lacks() {
        assert_eq!(decoded("stop", "{}"), Event::Stop);
        assert_eq!(decoded("stop", r#"{"type": 5}"#), Event::Stop);
        assert_eq!(decoded("ping", r#"{"type": "stop"}"#), Event::Stop);
        // Data that is no object holds the name alone.
        assert_eq!(decoded("stop", "5"), Event::Stop);
        assert_eq!(
            decoded("text", "[1]"),
            Event::Text {
                text: Lenient(None)
            }
        );
        // What the reader does not know is nothing to it.
        assert_eq!(decoded("message", r#"{"choices": []}"#), Event::Other);
    }

    #[test]
    fn keep_alives_and_done_are_no_events_and_what_is_not_json_fails_the_stream() {
        assert!(matches!(event("message", " "), Ok(Data::Nothing)));
        assert!(matches!(event("message", "[DONE]"), Ok(Data::Done)));
        let Err(error) = event("message", "{oops") else {
            panic!("not JSON, read");
        };
        assert_eq!(error.kind, crate::model::ModelErrorKind::Protocol);
        assert!(
            error.message.starts_with("a stream event is not JSON"),
            "{}",
            error.message
        );
    }

    #[test]
    fn lenient_fields_read_what_fits_and_nothing_else() {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Usage {
            input: Lenient<u64>,
            output: Lenient<u64>,
            name: Lenient<String>,
        }
        let usage: Usage =
            serde_json::from_str(r#"{"input": 3, "output": "7", "name": null}"#).unwrap();
        assert_eq!((usage.input.count(), usage.output.count()), (3, 0));
        assert_eq!(usage.name.non_empty(), None);
        let text = |json| serde_json::from_str::<ArgumentsText>(json).unwrap().0;
        assert_eq!(text(r#""{\"a\":1}""#), r#"{"a":1}"#);
        assert_eq!(text(r#"{"a": 1}"#), r#"{"a":1}"#);
        assert_eq!(text("null"), "");
    }
}
