//! OpenAI's Responses API (`POST {base_url}/responses`).
//!
//! The conversation goes out as input items: user and assistant messages,
//! `function_call` items for the model's tool calls and
//! `function_call_output` items for their answers (images included, as
//! `input_image` parts), with system messages as `instructions`. The items
//! an answer returned (reasoning, message, `function_call`) go back
//! verbatim and in their order, ids included, as the API requires: a
//! reasoning item must be followed by the items it led to. Responses are
//! stored as the API does by default, so those items can be referred to by
//! id; requesting `reasoning.encrypted_content` instead is refused by
//! models without reasoning.

mod items;
mod stream;

use std::collections::HashSet;
use std::ops::ControlFlow;

use serde::Serialize;
use serde_json::{Value, json};

use super::config::Provider;
use super::openai::OfferedTools;
use super::stream::view;
use super::{
    AnswerError, AssistantToolCall, ClientSettings, Message, ModelError, ModelRequest,
    ModelResponse, StreamedAnswer, Wire,
};
use crate::outcome::ContentBlock;
use crate::wire::providers::{self, Vendor};
use items::{ItemKind, ItemView, Response};
use stream::{Event, Reader};

/// The Responses API wire format.
#[derive(Debug)]
pub struct OpenAIResponses;

impl Wire for OpenAIResponses {
    const NAME: &'static str = "openai-responses";
    const PATH: &'static str = "/responses";
    const MIN_OUTPUT_TOKENS: u32 = Provider::OpenAIResponses.min_output_tokens();
    type Answer = Response;
    type Event = Event;
    type Reader = Reader;

    fn body<'a>(
        settings: &'a ClientSettings,
        request: &'a ModelRequest<'a>,
    ) -> impl Serialize + Send + 'a {
        ResponsesRequest {
            model: &settings.model,
            input: input(request.messages),
            max_output_tokens: request.max_tokens,
            stream: settings.stream,
            instructions: super::system_text(request.messages),
            tools: OfferedTools::new(
                request,
                function_tool,
                |name| json!({"type": "function", "name": name}),
            ),
            // The API takes neither a seed nor stop sequences.
            temperature: request.sampling.temperature,
            top_p: request.sampling.top_p,
            text: request.response_format.map(|format| {
                json!({"format": {
                    "type": "json_schema",
                    "name": format.name,
                    "schema": format.schema,
                    "strict": format.strict,
                }})
            }),
        }
    }

    fn answer(response: Response) -> Result<ModelResponse, AnswerError> {
        items::answer(response)
    }

    fn read(
        reader: &mut Reader,
        event: Event,
        answer: &mut StreamedAnswer<'_>,
    ) -> Result<ControlFlow<()>, ModelError> {
        stream::read(reader, event, answer)
    }

    fn finish(reader: Reader, answer: StreamedAnswer<'_>) -> Result<ModelResponse, ModelError> {
        stream::finish(reader, answer)
    }
}

/// A Responses API request. What is not set is not sent.
#[derive(Serialize)]
struct ResponsesRequest<'a> {
    model: &'a str,
    input: Vec<Value>,
    max_output_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    #[serde(flatten)]
    tools: OfferedTools,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Value>,
}

/// A tool as the Responses API takes it: a function, not strict.
fn function_tool(tool: &crate::spec::ToolSpec) -> Value {
    json!({
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": false,
    })
}

/// The conversation as input items.
fn input(conversation: &[Message]) -> Vec<Value> {
    let mut fitted = super::fitted_tool_results(conversation, Vendor::OpenAI);
    let mut items = Vec::with_capacity(conversation.len());
    for message in conversation.iter().filter(|m| !m.is_empty_turn()) {
        match message {
            Message::System { .. } => {}
            Message::User { content } => items.push(json!({"role": "user", "content": content})),
            Message::Assistant {
                content,
                tool_calls,
                provider_items,
            } => assistant_items(&mut items, content, tool_calls, provider_items),
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                let blocks = fitted.next().unwrap_or_default();
                items.push(call_output(tool_call_id, content, &blocks));
            }
        }
    }
    items
}

/// One assistant turn as input items: the items the API returned, verbatim
/// and in their order (reasoning, message and `function_call` items keep
/// their ids, which the API pairs up), then whatever they do not carry — a
/// turn an embedder built by hand has no items at all.
fn assistant_items(
    items: &mut Vec<Value>,
    content: &str,
    tool_calls: &[AssistantToolCall],
    provider_items: &[Value],
) {
    let views: Vec<ItemView> = provider_items.iter().map(view).collect();
    for (item, view) in provider_items.iter().zip(&views) {
        items.push(sent_item(item, view));
    }
    let has_message = views.iter().any(|v| v.is(ItemKind::Message));
    if !has_message && !content.is_empty() {
        items.push(json!({"role": "assistant", "content": content}));
    }
    let carried: HashSet<&str> = views
        .iter()
        .filter(|v| v.is(ItemKind::FunctionCall))
        .filter_map(|v| v.call_id.0.as_deref())
        .collect();
    for call in tool_calls {
        if !carried.contains(call.id.as_str()) {
            items.push(json!({
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_text(),
            }));
        }
    }
}

/// A returned item as it goes back: verbatim, but for a `function_call`
/// item whose arguments are not a JSON object (a call cut off at the token
/// limit mid-arguments): those go back as `{}`, as
/// [`AssistantToolCall::arguments_text`] sends a turn built by hand, since
/// servers that parse them refuse the whole input otherwise.
fn sent_item(item: &Value, view: &ItemView) -> Value {
    let mut item = item.clone();
    // Arguments some servers send as the object itself stay as they came.
    let garbled = view.is(ItemKind::FunctionCall)
        && item["arguments"]
            .as_str()
            .is_some_and(|text| !super::is_json_object(text));
    if garbled && let Some(object) = item.as_object_mut() {
        object.insert("arguments".into(), json!("{}"));
    }
    item
}

/// The answer to one call, images included as `input_image` parts.
/// `blocks` are the result's, fitted for OpenAI (empty for a text-only
/// result, whose text is `content`).
fn call_output(call_id: &str, content: &str, blocks: &[ContentBlock]) -> Value {
    let images: Vec<Value> = blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image(media) => Some(json!({
                "type": "input_image",
                "image_url": providers::data_url(media),
            })),
            _ => None,
        })
        .collect();
    let output = if blocks.is_empty() {
        json!(content)
    } else if images.is_empty() {
        json!(providers::as_text(blocks))
    } else {
        let mut parts = vec![json!({"type": "input_text", "text": providers::as_text(blocks)})];
        parts.extend(images);
        Value::Array(parts)
    };
    json!({
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
    })
}

#[cfg(test)]
mod tests {
    use super::items::MAX_OUTPUT_ITEMS;
    use super::*;
    use crate::model::tests::{answer, image};
    use crate::model::{ModelErrorKind, ModelEvent};

    fn parse_response(body: Value) -> Result<ModelResponse, ModelError> {
        OpenAIResponses::parse_response(body.to_string().as_bytes())
    }

    async fn read_stream(
        response: reqwest::Response,
        events: crate::model::EventSink<'_>,
    ) -> Result<ModelResponse, ModelError> {
        OpenAIResponses::read_stream(response, events).await
    }
    use crate::wire::image::tests::png_of;

    #[test]
    fn function_call_outputs_carry_only_the_images_openai_takes() {
        let svg = image("image/svg+xml", b"<svg/>".to_vec());
        let png = image("image/png", png_of(2, 2, 0));
        let input = input(&[answer("a", vec![svg, png])]);
        let output = input[0]["output"].as_array().unwrap();
        assert_eq!(output.len(), 2, "{output:?}");
        assert!(
            output[0]["text"].as_str().unwrap().starts_with(
                "[image dropped: image/svg+xml, 6 B, is not a PNG, JPEG, GIF or WebP image]"
            ),
            "{output:?}"
        );
        assert_eq!(output[1]["type"], "input_image");
    }

    fn call(id: &str) -> AssistantToolCall {
        AssistantToolCall {
            id: id.into(),
            name: "calc".into(),
            arguments: "{\"expression\":\"1\"}".into(),
        }
    }

    fn output(call_id: &str) -> Message {
        Message::Tool {
            tool_call_id: call_id.into(),
            name: "calc".into(),
            content: "1".into(),
            is_error: false,
            blocks: Vec::new(),
        }
    }

    #[test]
    fn the_items_go_back_verbatim_in_order_and_outputs_follow_them() {
        let items = vec![
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "calc", "arguments": "{\"expression\":\"1\"}", "status": "completed"}),
        ];
        let conversation = [
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call("call_a")],
                provider_items: items.clone(),
            },
            output("call_a"),
        ];
        let input = input(&conversation);
        assert_eq!(input.len(), 4);
        assert_eq!(input[0], json!({"role": "user", "content": "hi"}));
        assert_eq!(input[1..3], items[..]);
        assert_eq!(
            input[3],
            json!({"type": "function_call_output", "call_id": "call_a", "output": "1"})
        );
    }

    /// A call cut off at the token limit leaves its item's arguments no
    /// JSON; servers that parse them (llama.cpp, vLLM) refuse the whole
    /// input, so they go back as `{}`, the item otherwise as it came.
    #[test]
    fn a_returned_call_with_garbled_arguments_goes_back_with_an_empty_object() {
        let cut = json!({"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "calc", "arguments": "{\"expression\": \"1234", "status": "incomplete"});
        let conversation = [Message::Assistant {
            content: String::new(),
            tool_calls: vec![call("call_a")],
            provider_items: vec![cut.clone()],
        }];
        let input = input(&conversation);
        let mut expected = cut;
        expected["arguments"] = json!("{}");
        assert_eq!(input, [expected]);
    }

    #[test]
    fn a_turn_built_by_hand_is_sent_from_its_text_and_calls() {
        let conversation = [Message::Assistant {
            content: "Let me.".into(),
            tool_calls: vec![call("call_a")],
            provider_items: Vec::new(),
        }];
        let input = input(&conversation);
        assert_eq!(input[0], json!({"role": "assistant", "content": "Let me."}));
        assert_eq!(input[1]["type"], "function_call");
        assert_eq!(input[1]["call_id"], "call_a");
        assert!(input[1].get("id").is_none());
    }

    #[test]
    fn a_whole_response_reads_text_calls_items_and_usage() {
        let body = json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Let me."}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calc", "arguments": "{}"},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 3},
        });
        let answer = parse_response(body.clone()).unwrap();
        assert_eq!(answer.content, "Let me.");
        assert_eq!(answer.tool_calls[0].id, "call_1");
        assert_eq!(
            answer.provider_items,
            body["output"].as_array().unwrap()[..]
        );
        assert_eq!(answer.usage.input_tokens, 10);
        assert_eq!(answer.stop_reason.as_deref(), Some("completed"));
    }

    #[test]
    fn a_repeated_item_keeps_its_place_and_last_version_and_calls_without_ids_get_unique_ones() {
        let fc = |id: &str, call_id: Option<&str>, arguments: &str| {
            let mut item =
                json!({"type": "function_call", "id": id, "name": "calc", "arguments": arguments});
            if let Some(call_id) = call_id {
                item["call_id"] = json!(call_id);
            }
            item
        };
        let body = json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                fc("fc_1", Some("call_1"), ""),
                fc("fc_1", Some("call_1"), "{}"),
                fc("fc_2", None, "{}"),
                fc("fc_3", Some("call_1"), "{\"x\":1}"),
                fc("", Some(""), "{}"),
                fc("", None, "{}"),
                {"type": "web_search_call", "id": "ws_1"},
                "not an item",
                null,
            ],
        });
        let answer = parse_response(body).unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), 4, "{ids:?}");
        // The repeated call stays right after its reasoning, as last sent.
        assert_eq!(answer.provider_items[0]["id"], "rs_1");
        assert_eq!(ids[0], "call_1");
        assert_eq!(answer.tool_calls[0].arguments, "{\"x\":1}");
        // Made up where missing (an empty one is none): random, and unlike
        // each other.
        assert!(ids[1..].iter().all(|id| id.starts_with("call_toolhost_")));
        assert!(ids[1] != ids[2] && ids[2] != ids[3] && ids[1] != ids[3]);
        // The items carry the ids the outputs will answer, and nothing the
        // next request could not use is kept.
        let item_ids: Vec<&str> = answer.provider_items[1..]
            .iter()
            .map(|i| i["call_id"].as_str().unwrap())
            .collect();
        assert_eq!(item_ids, ids);
        assert_eq!(answer.provider_items.len(), 5);
    }

    #[test]
    fn items_that_would_leave_two_calls_one_call_id_are_refused() {
        // The third repeats the first's item id with the second's call id.
        let body = json!({"status": "completed", "output": [
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "calc", "arguments": "{}"},
            {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "calc", "arguments": "{}"},
            {"type": "function_call", "id": "fc_1", "call_id": "c2", "name": "calc", "arguments": "{}"},
        ]});
        let error = parse_response(body).unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("c2"), "{}", error.message);
    }

    #[test]
    fn an_answer_with_too_many_items_is_refused() {
        let items: Vec<Value> = (0..=MAX_OUTPUT_ITEMS)
            .map(|i| json!({"type": "reasoning", "id": format!("rs_{i}")}))
            .collect();
        let error = parse_response(json!({"status": "completed", "output": items})).unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("output items"), "{}", error.message);
    }

    #[tokio::test]
    async fn answers_that_are_not_objects_are_protocol_errors() {
        for body in [
            json!([1, 2]),
            json!("text"),
            json!(null),
            json!({"output": 5}),
        ] {
            let error = parse_response(body.clone()).unwrap_err();
            assert_eq!(error.kind, ModelErrorKind::Protocol, "{body}");
        }
        // An event named `response.completed` whose data is no object.
        let body = "event: response.completed\ndata: 5\n\n".to_owned();
        let error = read_stream(reqwest::Response::from(http::Response::new(body)), &|_| {})
            .await
            .unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
    }

    #[test]
    fn an_endpoints_text_in_an_error_is_cut_short() {
        let long = "x".repeat(100_000);
        let error = parse_response(json!({"status": "done", "junk": long})).unwrap_err();
        assert!(error.message.len() < 1_000, "{}", error.message.len());
        let error =
            parse_response(json!({"status": "failed", "error": {"message": long}})).unwrap_err();
        assert!(error.message.len() < 1_000, "{}", error.message.len());
    }

    fn sse(events: &[Value]) -> reqwest::Response {
        let body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        reqwest::Response::from(http::Response::new(body))
    }

    #[tokio::test]
    async fn a_stream_without_positions_keeps_arrival_order_and_counts_repeats_once() {
        let added = |id: &str, call_id: &str| {
            json!({"type": "response.output_item.added",
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": ""}})
        };
        let delta = |id: &str, piece: &str| json!({"type": "response.function_call_arguments.delta", "item_id": id, "delta": piece});
        let done = |id: &str, call_id: &str, arguments: &str| {
            json!({"type": "response.output_item.done",
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": arguments}})
        };
        let mut events = vec![added("fc_b", "call_b"), added("fc_a", "call_a")];
        // Many small deltas, every one kept.
        for _ in 0..2000 {
            events.push(delta("fc_b", " "));
        }
        events.extend([
            delta("fc_b", "{}"),
            delta("fc_a", "{\"x\":1}"),
            done("fc_a", "call_a", "{\"x\":1}"),
            done("fc_a", "call_a", "{\"x\":1}"),
            json!({"type": "response.completed", "response": {"status": "completed", "output": [], "usage": {"input_tokens": 1, "output_tokens": 2}}}),
        ]);
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_b", "call_a"]);
        assert_eq!(answer.tool_calls[0].arguments.trim(), "{}");
        assert_eq!(answer.tool_calls[1].arguments, "{\"x\":1}");
        assert_eq!(answer.provider_items.len(), 2);
        assert_eq!(answer.provider_items[0]["id"], "fc_b");
        assert_eq!(answer.usage.output_tokens, 2);
    }

    #[tokio::test]
    async fn a_stream_that_stops_before_it_completes_is_cut() {
        let events = [json!({"type": "response.created", "response": {}})];
        let error = read_stream(sse(&events), &|_| {}).await.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::StreamCut);
    }

    fn completed(output: Value) -> Value {
        json!({"type": "response.completed", "response": {"status": "completed", "output": output}})
    }

    #[tokio::test]
    async fn the_completed_responses_output_wins_over_what_the_events_built() {
        let message = json!({"type": "message", "id": "msg_1", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}]});
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Hel"}),
            completed(json!([message])),
        ];
        let shown = std::sync::Mutex::new(String::new());
        let answer = read_stream(sse(&events), &|event| {
            let ModelEvent::TextDelta(text) = event;
            shown.lock().unwrap().push_str(&text);
        })
        .await
        .unwrap();
        assert_eq!(answer.content, "Hello there.");
        assert_eq!(answer.provider_items, [message]);
        // What was shown ends as the answer reads.
        assert_eq!(*shown.lock().unwrap(), "Hello there.");
    }

    #[tokio::test]
    async fn a_completed_message_without_text_gets_the_streamed_text() {
        let events = [
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Hi"}),
            completed(
                json!([{"type": "message", "id": "msg_1", "role": "assistant", "content": []}]),
            ),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        assert_eq!(answer.content, "Hi");
        // The item goes back in the next request: with the text.
        assert_eq!(answer.provider_items[0]["content"][0]["text"], "Hi");
    }

    #[tokio::test]
    async fn a_message_whose_done_never_came_keeps_its_streamed_text() {
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Hel"}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "lo."}),
            // Not an item: passed over, not a slot of its own.
            json!({"type": "response.output_item.added", "output_index": 1}),
            completed(json!([])),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        assert_eq!(answer.content, "Hello.");
        assert_eq!(answer.provider_items.len(), 1);
        assert_eq!(answer.provider_items[0]["id"], "msg_1");
        assert_eq!(answer.provider_items[0]["content"][0]["text"], "Hello.");
    }

    #[tokio::test]
    async fn an_event_for_another_item_is_not_matched_by_its_position() {
        let added = |id: &str, call_id: &str| {
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": ""}})
        };
        let events = [
            added("fc_a", "call_a"),
            // The same position, another id: a new item, not an update.
            added("fc_b", "call_b"),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_b", "output_index": 0, "delta": "{\"b\":1}"}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_a", "output_index": 0, "delta": "{\"a\":1}"}),
            completed(json!([])),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        let calls: Vec<(&str, &str)> = answer
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("call_a", "{\"a\":1}"), ("call_b", "{\"b\":1}")]);
    }

    #[tokio::test]
    async fn a_slot_is_found_by_its_first_position_only() {
        let call = |id: Option<&str>, call_id: &str| {
            let mut item = json!({"type": "function_call", "call_id": call_id, "name": "calc", "arguments": "{}"});
            if let Some(id) = id {
                item["id"] = json!(id);
            }
            item
        };
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0, "item": call(Some("fc_a"), "call_a")}),
            // Done at another position: the item keeps its first.
            json!({"type": "response.output_item.done", "output_index": 1, "item": call(Some("fc_a"), "call_a")}),
            // So an item without an id at that position is a new one.
            json!({"type": "response.output_item.added", "output_index": 1, "item": call(None, "call_b")}),
            completed(json!([])),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_a", "call_b"]);
    }
}
