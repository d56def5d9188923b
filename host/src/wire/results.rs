//! Outcomes in each wire format: the ToolMessage (LangChain's shape),
//! OpenAI chat completions' messages, Anthropic's `tool_result` block, and
//! MCP's `CallToolResult`.
//!
//! Every front end answers through these functions, so a call reads the
//! same, and carries the same typed error, wherever it came from.
//!
//! Content blocks map once per format:
//!
//! | block | ToolMessage (LangChain) | OpenAI | Anthropic `tool_result` | MCP |
//! |---|---|---|---|---|
//! | text | `text` | the tool message's text | `text` (none empty) | `text` |
//! | image | `image` (`base64`, `mime_type`) | a line of text, and the image in the user message after the tool messages | `image` (base64 source) | `image` |
//! | audio | `audio` | a line of text | a line of text (the API takes no audio) | `audio` |
//! | resource link | `file` with `url` | a line of text | a line of text | `resource_link` |
//! | embedded text | `text-plain` (or `file`) | the text, after a line naming it | `document` with a text source | `resource` with `text` |
//! | embedded bytes | `file` (`base64`) | a line of text | `document` for PDF; else a line of text | `resource` with `blob` |
//!
//! What OpenAI and Anthropic take of images (types, sizes, counts) is
//! decided in [`super::providers`], for these answers and for the agent
//! loop's requests alike; an image they cannot take is a line of text
//! saying why. A text-only result keeps `content` a string in the
//! ToolMessage and in Anthropic's block, as before contract 0.2.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::outcome::{CallError, ContentBlock, Outcome, ResourceContents};
use crate::spec::ToolSpec;
use crate::tool_host::CallResult;
use crate::wire::definitions::mcp_structured;
use crate::wire::providers::{self, ImageBudget, Vendor};

/// A wire format for results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Format {
    /// The [`ToolMessage`]: LangChain's shape plus the typed error.
    #[default]
    ToolMessage,
    /// OpenAI chat completions' messages, exactly as the API takes them:
    /// a `tool` message of text per call, then one `user` message carrying
    /// the images (tool messages take text only), as the agent loop sends
    /// them.
    OpenAI,
    /// Anthropic's `tool_result` content block, exactly as the Messages API
    /// takes it (no other fields: the API refuses unknown ones).
    Anthropic,
    /// MCP's `CallToolResult`, the typed error in `_meta`.
    Mcp,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "toolmessage" | "langchain" => Ok(Self::ToolMessage),
            "openai" => Ok(Self::OpenAI),
            "anthropic" => Ok(Self::Anthropic),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown result format {:?}; use toolmessage, openai, anthropic or mcp",
                crate::outcome::clip(other, 32)
            )),
        }
    }
}

/// The `_meta` key of MCP results that carries the typed error.
pub const MCP_ERROR_KEY: &str = "toolhost/error";
/// The `_meta` key of MCP results that carries the artifact, which is for
/// the application and never for the model.
pub const MCP_ARTIFACT_KEY: &str = "toolhost/artifact";

/// One call's answer in `format`. `spec` is the called tool's, when it
/// exists: MCP wraps structured output to match the tool's advertised
/// output schema. For [`Format::OpenAI`], a JSON array of messages: the
/// tool message, then the user message carrying its images when it has
/// any. A batch is answered through [`Answers`], whose images share one
/// user message and one request's limits.
pub fn render(outcome: &Outcome, spec: Option<&ToolSpec>, format: Format) -> Value {
    let mut answers = Answers::new(format);
    let answer = answers.answer(outcome, spec);
    match answers.finish() {
        _ if format != Format::OpenAI => answer,
        Some(images) => json!([answer, images]),
        None => json!([answer]),
    }
}

/// A batch's answers in one format, given one at a time, in order, as the
/// outcomes come: one value per call, and for [`Format::OpenAI`] one more
/// at the end, the user message carrying the images ([`Answers::finish`]).
///
/// The answers to a batch go back to the model in one request, so its
/// images are counted against that request's limits (OpenAI: 500 images,
/// 50 MB; Anthropic: 100, 20 MiB) in the order they come; those past them
/// read as a line of text saying so. That also bounds what an OpenAI
/// batch holds until its end, whatever its length.
#[derive(Debug)]
pub struct Answers {
    format: Format,
    budget: Option<ImageBudget>,
    images: Vec<Value>,
}

impl Answers {
    /// No answer given yet.
    pub fn new(format: Format) -> Self {
        let budget = match format {
            Format::OpenAI => Some(ImageBudget::new(Vendor::OpenAI)),
            Format::Anthropic => Some(ImageBudget::new(Vendor::Anthropic)),
            Format::ToolMessage | Format::Mcp => None,
        };
        Self {
            format,
            budget,
            images: Vec::new(),
        }
    }

    /// The answer to `outcome`; `spec` as for [`render`].
    pub fn answer(&mut self, outcome: &Outcome, spec: Option<&ToolSpec>) -> Value {
        match (self.format, &mut self.budget) {
            (Format::Anthropic, Some(budget)) => anthropic_tool_result(outcome, budget),
            (Format::OpenAI, Some(budget)) => {
                let (message, images) = openai_messages(outcome, budget);
                self.images.extend(images);
                message
            }
            (Format::Mcp, _) => mcp_call_result(outcome, spec),
            _ => serde_json::to_value(outcome.to_message()).expect("a ToolMessage is JSON"),
        }
    }

    /// What follows the answers: for [`Format::OpenAI`], the user message
    /// carrying every image of the batch, each after a line naming its
    /// call; `None` when there is none, and for the other formats.
    pub fn finish(self) -> Option<Value> {
        providers::openai_images_message(self.images)
    }
}

/// `results` answered in `format` as they come (see [`Answers`]): one
/// value per result, in order, then for [`Format::OpenAI`] the user message
/// carrying the batch's images. Each result carries its tool's spec, so no
/// name is looked up again.
pub fn answer_stream<'a>(
    results: impl futures::Stream<Item = CallResult> + 'a,
    format: Format,
) -> impl futures::Stream<Item = Value> + 'a {
    use futures::StreamExt as _;
    let state = (Box::pin(results), Some(Answers::new(format)));
    futures::stream::unfold(state, |(mut results, answers)| async move {
        let mut answers = answers?;
        match results.next().await {
            Some(result) => {
                let answer = answers.answer(&result.outcome, result.spec.as_deref());
                Some((answer, (results, Some(answers))))
            }
            None => answers.finish().map(|last| (last, (results, None))),
        }
    })
}

/// Anthropic's `tool_result` block, its images counted against `budget`.
pub fn anthropic_tool_result(outcome: &Outcome, budget: &mut ImageBudget) -> Value {
    let content = match &outcome.result {
        Ok(output) if !output.is_text_only() => {
            providers::anthropic_content(&output.content, budget)
        }
        _ => providers::anthropic_text(&outcome.content()),
    };
    json!({
        "type": "tool_result",
        "tool_use_id": outcome.call_id,
        "content": content,
        "is_error": outcome.is_error(),
    })
}

/// OpenAI's tool message for `outcome`, and the parts that carry its images
/// in the user message after the turn's tool messages.
fn openai_messages(outcome: &Outcome, budget: &mut ImageBudget) -> (Value, Vec<Value>) {
    match &outcome.result {
        Ok(output) if !output.is_text_only() => {
            let fitted = providers::fit(Vendor::OpenAI, &output.content, budget);
            let message =
                providers::openai_tool_message(&outcome.call_id, &providers::as_text(&fitted));
            (
                message,
                providers::openai_image_parts(&outcome.call_id, &fitted),
            )
        }
        _ => (
            providers::openai_tool_message(&outcome.call_id, &outcome.content()),
            Vec::new(),
        ),
    }
}

/// Blocks as MCP content.
pub fn mcp_content(blocks: &[ContentBlock]) -> Value {
    blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => json!({"type": "text", "text": t}),
            ContentBlock::Image(media) => {
                json!({"type": "image", "data": BASE64.encode(&media.data), "mimeType": media.mime_type})
            }
            ContentBlock::Audio(media) => {
                json!({"type": "audio", "data": BASE64.encode(&media.data), "mimeType": media.mime_type})
            }
            ContentBlock::ResourceLink(link) => {
                let mut out = json!({"type": "resource_link", "uri": link.uri, "name": link.name});
                if let Some(mime) = &link.mime_type {
                    out["mimeType"] = json!(mime);
                }
                if let Some(description) = &link.description {
                    out["description"] = json!(description);
                }
                out
            }
            ContentBlock::Resource(resource) => {
                let mut inner = json!({"uri": resource.uri});
                if let Some(mime) = &resource.mime_type {
                    inner["mimeType"] = json!(mime);
                }
                match &resource.contents {
                    ResourceContents::Text(t) => inner["text"] = json!(t),
                    ResourceContents::Blob(data) => inner["blob"] = json!(BASE64.encode(data)),
                }
                json!({"type": "resource", "resource": inner})
            }
        })
        .collect()
}

/// Blocks as LangChain's standard content blocks (langchain-core 1.x).
pub fn langchain_content(blocks: &[ContentBlock]) -> Vec<Value> {
    blocks.iter().map(langchain_block).collect()
}

fn langchain_block(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text(t) => json!({"type": "text", "text": t}),
        ContentBlock::Image(media) => {
            json!({"type": "image", "base64": BASE64.encode(&media.data), "mime_type": media.mime_type})
        }
        ContentBlock::Audio(media) => {
            json!({"type": "audio", "base64": BASE64.encode(&media.data), "mime_type": media.mime_type})
        }
        ContentBlock::ResourceLink(link) => {
            let mut out = json!({"type": "file", "url": link.uri, "extras": {"name": link.name}});
            if let Some(mime) = &link.mime_type {
                out["mime_type"] = json!(mime);
            }
            if let Some(description) = &link.description {
                out["extras"]["description"] = json!(description);
            }
            out
        }
        ContentBlock::Resource(resource) => {
            match (&resource.contents, resource.mime_type.as_deref()) {
                (ResourceContents::Text(t), None | Some("text/plain")) => json!({
                    "type": "text-plain", "text": t, "mime_type": "text/plain", "extras": {"uri": resource.uri},
                }),
                (ResourceContents::Text(t), Some(mime)) => json!({
                    "type": "file", "base64": BASE64.encode(t), "mime_type": mime, "extras": {"uri": resource.uri},
                }),
                (ResourceContents::Blob(data), mime) => json!({
                    "type": "file", "base64": BASE64.encode(data),
                    "mime_type": mime.unwrap_or("application/octet-stream"), "extras": {"uri": resource.uri},
                }),
            }
        }
    }
}

impl Serialize for ContentBlock {
    /// As a LangChain standard content block: how transcripts record it.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        langchain_block(self).serialize(serializer)
    }
}

/// MCP's `CallToolResult`: the text as one text block, `structuredContent`
/// when the tool gave structured output, `isError` for every failed
/// outcome (invalid arguments included, as the specification asks), and the
/// typed error under [`MCP_ERROR_KEY`] in `_meta`.
pub fn mcp_call_result(outcome: &Outcome, spec: Option<&ToolSpec>) -> Value {
    let content = match &outcome.result {
        Ok(output) if !output.content.is_empty() => mcp_content(&output.content),
        _ => json!([{"type": "text", "text": outcome.content()}]),
    };
    let mut result = json!({
        "content": content,
        "isError": outcome.is_error(),
    });
    let mut meta = Map::new();
    // A tool that declares an output schema must send structured output
    // (MCP clients refuse the result otherwise, as the Python SDK does): when
    // it sent none, or it was dropped for being over `max_output`, the
    // result says so as an error instead of breaking the client.
    let missing = outcome.result.as_ref().is_ok_and(|output| {
        output.structured.is_none() && spec.is_some_and(|s| s.output_schema.is_some())
    });
    if missing {
        let error = CallError::new(
            crate::outcome::ErrorType::ToolError,
            "the tool declares an output schema but gave no structured output (or it was over \
             the max_output limit and was dropped); raise max_output, or make the tool return it",
        );
        result["isError"] = json!(true);
        meta.insert(
            MCP_ERROR_KEY.into(),
            serde_json::to_value(&error).expect("an error is JSON"),
        );
        result["_meta"] = Value::Object(meta);
        return result;
    }
    match &outcome.result {
        Ok(output) => {
            if let Some(structured) = &output.structured {
                result["structuredContent"] = mcp_structured(spec, structured.clone());
            }
            if let Some(artifact) = &output.artifact {
                meta.insert(MCP_ARTIFACT_KEY.into(), json!(artifact));
            }
        }
        Err(error) => {
            meta.insert(
                MCP_ERROR_KEY.into(),
                serde_json::to_value(error).expect("an error is JSON"),
            );
        }
    }
    if !meta.is_empty() {
        result["_meta"] = Value::Object(meta);
    }
    result
}

/// A ToolMessage: LangChain's shape plus the typed error.
///
/// ```json
/// {"role":"tool","tool_call_id":"call_7","name":"fetch","content":"Error: tool 'fetch' timed out after 2s",
///  "is_error":true,"status":"error","error":{"type":"timeout","message":"timed out after 2s","retryable":true},
///  "artifact":null}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolMessage {
    /// Always `tool`.
    pub role: &'static str,
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub name: String,
    /// What the model reads: text, or LangChain content blocks when the
    /// result has more than text.
    pub content: ToolContent,
    /// Whether the call failed.
    pub is_error: bool,
    /// `success` or `error`, as LangChain spells it.
    pub status: &'static str,
    /// The typed error, when the call failed.
    pub error: Option<CallError>,
    /// Structured output, when the tool gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// For the application, never for the model.
    pub artifact: Option<String>,
}

/// A ToolMessage's `content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum ToolContent {
    /// Text only, as one string.
    Text(String),
    /// Several blocks, as LangChain standard content blocks.
    Blocks(Vec<ContentBlock>),
}

impl ToolContent {
    /// The content as text: blocks other than text described in a line.
    pub fn to_text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Blocks(blocks) => blocks
                .iter()
                .map(|b| b.as_text())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The blocks, when there is more than text.
    pub fn blocks(&self) -> &[ContentBlock] {
        match self {
            Self::Text(_) => &[],
            Self::Blocks(blocks) => blocks,
        }
    }
}

impl Outcome {
    /// The LangChain-compatible ToolMessage, with the typed error.
    pub fn to_message(&self) -> ToolMessage {
        let (error, artifact, structured) = match &self.result {
            Ok(output) => (None, output.artifact.clone(), output.structured.clone()),
            Err(error) => (Some(error.clone()), None, None),
        };
        ToolMessage {
            role: "tool",
            tool_call_id: self.call_id.clone(),
            name: self.tool.clone(),
            content: match &self.result {
                Ok(output) if !output.is_text_only() => ToolContent::Blocks(output.content.clone()),
                _ => ToolContent::Text(self.content()),
            },
            is_error: self.is_error(),
            status: if self.is_error() { "error" } else { "success" },
            error,
            structured,
            artifact,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{CallStats, EmbeddedResource, ErrorType, Media, ResourceLink, ToolOutput};

    /// A 2×1 PNG's header: 33 bytes, `iVBORw0KGgo…` in base64.
    fn png() -> bytes::Bytes {
        bytes::Bytes::from(crate::wire::image::tests::png_of(2, 1, 0))
    }

    fn mixed() -> Outcome {
        let png = png();
        Outcome {
            call_id: "c".into(),
            tool: "chart".into(),
            result: Ok(ToolOutput {
                content: vec![
                    ContentBlock::Text("a chart".into()),
                    ContentBlock::Image(Media {
                        mime_type: "image/png".into(),
                        data: png,
                    }),
                    ContentBlock::Audio(Media {
                        mime_type: "audio/wav".into(),
                        data: bytes::Bytes::from_static(b"RIFF"),
                    }),
                    ContentBlock::ResourceLink(ResourceLink {
                        uri: "file:///r.csv".into(),
                        name: "r.csv".into(),
                        mime_type: Some("text/csv".into()),
                        description: None,
                    }),
                    ContentBlock::Resource(EmbeddedResource {
                        uri: "mem://notes".into(),
                        mime_type: None,
                        contents: ResourceContents::Text("hi".into()),
                    }),
                ],
                ..ToolOutput::default()
            }),
            stats: CallStats::default(),
        }
    }

    #[test]
    fn each_block_maps_once_to_each_format() {
        let outcome = mixed();
        let png = BASE64.encode(png());
        assert_eq!(
            render(&outcome, None, Format::Mcp)["content"],
            json!([
                {"type": "text", "text": "a chart"},
                {"type": "image", "data": png, "mimeType": "image/png"},
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
                {"type": "resource_link", "uri": "file:///r.csv", "name": "r.csv", "mimeType": "text/csv"},
                {"type": "resource", "resource": {"uri": "mem://notes", "text": "hi"}},
            ])
        );
        let anthropic = render(&outcome, None, Format::Anthropic)["content"].clone();
        assert_eq!(
            anthropic[1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}})
        );
        assert_eq!(
            anthropic[2],
            json!({"type": "text", "text": "[audio: audio/wav, 4 B]"}),
            "the API takes no audio"
        );
        assert_eq!(anthropic[4]["type"], "document");
        let message = render(&outcome, None, Format::ToolMessage);
        assert_eq!(
            message["content"][1],
            json!({"type": "image", "base64": png, "mime_type": "image/png"})
        );
        assert_eq!(message["content"][3]["type"], "file");
        assert_eq!(message["content"][4]["type"], "text-plain");
        let text = "a chart\n[image: image/png, 33 B]\n[audio: audio/wav, 4 B]\n[resource r.csv: file:///r.csv]\n[resource mem://notes]\nhi";
        assert_eq!(outcome.content(), text);
        // OpenAI: the tool message in text, its image in a user message.
        assert_eq!(
            render(&outcome, None, Format::OpenAI),
            json!([
                {"role": "tool", "tool_call_id": "c", "content": text},
                {"role": "user", "content": [
                    {"type": "text", "text": "Image returned by tool call c:"},
                    {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
                ]},
            ])
        );
    }

    /// Two results with images and one without, answered as a batch: the
    /// tool messages in order, then one user message with every image.
    #[test]
    fn an_openai_batch_ends_with_one_user_message_carrying_its_images() {
        let mut answers = Answers::new(Format::OpenAI);
        let mut first = mixed();
        first.call_id = "a".into();
        let mut second = mixed();
        second.call_id = "b".into();
        let out: Vec<Value> = [first, timeout(), second]
            .iter()
            .map(|outcome| answers.answer(outcome, None))
            .collect();
        let roles: Vec<&Value> = out.iter().map(|m| &m["role"]).collect();
        assert_eq!(roles, ["tool", "tool", "tool"]);
        assert_eq!(
            out[1],
            json!({"role": "tool", "tool_call_id": "call_7",
                                   "content": "Error: tool 'fetch' timed out after 2s"})
        );
        let images = answers.finish().unwrap();
        assert_eq!(images["role"], "user");
        let texts: Vec<&Value> = images["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|part| part.get("text"))
            .collect();
        assert_eq!(
            texts,
            [
                "Image returned by tool call a:",
                "Image returned by tool call b:"
            ]
        );
        // Text only: no user message at all.
        let mut answers = Answers::new(Format::OpenAI);
        answers.answer(&success(), None);
        assert_eq!(answers.finish(), None);
    }

    /// An image a provider cannot take reads as a line saying why, in the
    /// answer the model gets, never silently dropped.
    #[test]
    fn images_a_provider_cannot_take_are_a_line_saying_why() {
        let svg = Outcome {
            call_id: "s".into(),
            tool: "draw".into(),
            result: Ok(ToolOutput {
                content: vec![
                    ContentBlock::Text(String::new()),
                    ContentBlock::Image(Media {
                        mime_type: "image/svg+xml".into(),
                        data: bytes::Bytes::from_static(b"<svg/>"),
                    }),
                    ContentBlock::Text("  ".into()),
                ],
                ..ToolOutput::default()
            }),
            stats: CallStats::default(),
        };
        let note = "[image dropped: image/svg+xml, 6 B, is not a PNG, JPEG, GIF or WebP image]";
        // Anthropic: the blank text blocks go (the API refuses them).
        assert_eq!(
            render(&svg, None, Format::Anthropic)["content"],
            json!([{"type": "text", "text": note}])
        );
        let openai = render(&svg, None, Format::OpenAI);
        assert_eq!(
            openai.as_array().unwrap().len(),
            1,
            "no image to carry: {openai}"
        );
        assert!(
            openai[0]["content"].as_str().unwrap().contains(note),
            "{openai}"
        );
        // The formats that are no provider's keep the block as it is.
        assert_eq!(
            render(&svg, None, Format::Mcp)["content"][1]["type"],
            "image"
        );
    }

    /// Anthropic refuses an empty text block, and a string content that is
    /// one: an empty result reads `(no output)`.
    #[test]
    fn an_empty_result_is_never_an_empty_anthropic_text_block() {
        let mut empty = success();
        if let Ok(output) = &mut empty.result {
            output.content = vec![ContentBlock::Text(" \n".into())];
        }
        assert_eq!(
            render(&empty, None, Format::Anthropic)["content"],
            "(no output)"
        );
        if let Ok(output) = &mut empty.result {
            output.content.push(ContentBlock::Text(String::new()));
        }
        assert_eq!(
            render(&empty, None, Format::Anthropic)["content"],
            "(no output)",
            "two blank text blocks are text only"
        );
        // The other formats keep what the tool said.
        assert_eq!(
            render(&empty, None, Format::ToolMessage)["content"],
            " \n\n"
        );
    }

    #[test]
    fn text_only_results_keep_string_content() {
        assert_eq!(
            render(&success(), None, Format::ToolMessage)["content"],
            "42"
        );
        assert_eq!(render(&success(), None, Format::Anthropic)["content"], "42");
    }

    fn timeout() -> Outcome {
        Outcome::error(
            "call_7",
            "fetch",
            CallError::new(ErrorType::Timeout, "timed out after 2s"),
        )
    }

    fn success() -> Outcome {
        Outcome {
            call_id: "c".into(),
            tool: "calc".into(),
            result: Ok(ToolOutput {
                content: vec![ContentBlock::Text("42".into())],
                structured: Some(json!({"value": 42.0})),
                artifact: Some("raw".into()),
            }),
            stats: CallStats::default(),
        }
    }

    #[test]
    fn timeout_message_matches_the_documented_shape() {
        assert_eq!(
            render(&timeout(), None, Format::ToolMessage),
            json!({"role":"tool","tool_call_id":"call_7","name":"fetch",
                "content":"Error: tool 'fetch' timed out after 2s","is_error":true,"status":"error",
                "error":{"type":"timeout","message":"timed out after 2s","retryable":true},"artifact":null})
        );
    }

    #[test]
    fn success_carries_structured_output_and_artifact() {
        let json = render(&success(), None, Format::ToolMessage);
        assert_eq!(json["status"], "success");
        assert_eq!(json["error"], Value::Null);
        assert_eq!(json["structured"]["value"], 42.0);
        assert_eq!(json["artifact"], "raw");
    }

    #[test]
    fn anthropic_blocks_have_exactly_the_api_fields() {
        assert_eq!(
            render(&timeout(), None, Format::Anthropic),
            json!({"type":"tool_result","tool_use_id":"call_7",
                   "content":"Error: tool 'fetch' timed out after 2s","is_error":true})
        );
    }

    #[test]
    fn mcp_results_keep_the_typed_error_in_meta() {
        assert_eq!(
            render(&timeout(), None, Format::Mcp),
            json!({"content":[{"type":"text","text":"Error: tool 'fetch' timed out after 2s"}],
                   "isError":true,
                   "_meta":{"toolhost/error":{"type":"timeout","message":"timed out after 2s","retryable":true}}})
        );
        assert_eq!(
            render(&success(), None, Format::Mcp),
            json!({"content":[{"type":"text","text":"42"}],"isError":false,
                   "structuredContent":{"value":42.0},"_meta":{"toolhost/artifact":"raw"}})
        );
    }

    #[test]
    fn mcp_results_of_tools_with_output_schemas_always_carry_structured_content() {
        let spec = ToolSpec {
            name: "calc".into(),
            title: "Calc".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(json!({"type": "object"})),
            hints: Default::default(),
        };
        let mut dropped = success();
        if let Ok(output) = &mut dropped.result {
            output.structured = None;
        }
        let result = render(&dropped, Some(&spec), Format::Mcp);
        assert_eq!(result["isError"], true, "{result}");
        assert!(result.get("structuredContent").is_none());
        assert_eq!(result["_meta"]["toolhost/error"]["type"], "tool_error");
        // With structured output, the same tool's result is a success.
        assert_eq!(
            render(&success(), Some(&spec), Format::Mcp)["isError"],
            false
        );
    }

    #[test]
    fn result_formats_parse_from_their_names() {
        assert_eq!("anthropic".parse::<Format>(), Ok(Format::Anthropic));
        assert_eq!("openai".parse::<Format>(), Ok(Format::OpenAI));
        assert_eq!("langchain".parse::<Format>(), Ok(Format::ToolMessage));
        assert!(
            "csv"
                .parse::<Format>()
                .unwrap_err()
                .contains("toolmessage, openai, anthropic or mcp")
        );
    }
}
