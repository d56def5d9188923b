//! Server-sent events from a streaming response.
//!
//! The events are read as the WHATWG rules say (lines ended by CR, LF or
//! CRLF; `event` and `data` fields; comments and other fields passed over;
//! an event dispatched at a blank line, and one left open at the end
//! dropped), in time linear in the body: every byte is looked at a bounded
//! number of times, however the endpoint splits lines and chunks. (The
//! crates for this copy the rest of their buffer at every line, which an
//! endpoint sending short lines turns into minutes of CPU; the parser
//! rmcp uses refuses the unknown fields the rules say to pass over.)

use std::collections::VecDeque;

use futures::{Stream, StreamExt as _};

use super::{ModelError, ModelErrorKind};

/// One server-sent event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event:` field, `message` when there was none (Anthropic names
    /// its events; OpenAI does not).
    pub name: String,
    /// The `data:` field, its lines joined by `\n`.
    pub data: String,
}

/// The events of `response`'s body, in order. A transport failure mid-body
/// is a [`ModelErrorKind::StreamCut`] (a [`ModelErrorKind::Timeout`] when the
/// endpoint went quiet); whether the stream ended too early is for the
/// caller to say, since only it knows what a complete answer is. A body
/// longer than [`MAX_ANSWER_BYTES`](super::MAX_ANSWER_BYTES) is a protocol
/// error: no answer a loop can use is that long, and the host must not hold
/// whatever an endpoint sends.
pub(crate) fn events(response: reqwest::Response) -> impl Stream<Item = Result<Event, ModelError>> {
    let state = Reading {
        body: Box::pin(response.bytes_stream()),
        parser: Parser::default(),
        read: 0,
        over: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
}

/// A body being read into events.
struct Reading<S> {
    body: std::pin::Pin<Box<S>>,
    parser: Parser,
    /// The bytes read so far.
    read: usize,
    /// Whether the body failed: nothing more comes.
    over: bool,
}

impl<S> Reading<S>
where
    S: Stream<Item = reqwest::Result<bytes::Bytes>>,
{
    async fn next(&mut self) -> Option<Result<Event, ModelError>> {
        loop {
            if let Some(event) = self.parser.ready.pop_front() {
                return Some(Ok(event));
            }
            if self.over {
                return None;
            }
            match self.body.next().await? {
                Ok(chunk) => {
                    self.read += chunk.len();
                    if self.read > super::MAX_ANSWER_BYTES {
                        self.over = true;
                        return Some(Err(ModelError::new(
                            ModelErrorKind::Protocol,
                            format!(
                                "the model's stream broke: the answer is longer than {} MiB",
                                super::MAX_ANSWER_BYTES >> 20
                            ),
                        )));
                    }
                    self.parser.feed(&chunk);
                }
                Err(e) => {
                    self.over = true;
                    // With its causes: reqwest's own message for a body
                    // that broke off says only that it could not be read.
                    let mut error = ModelError::from_reqwest(&e, "the model's stream broke");
                    error.kind = if e.is_timeout() {
                        ModelErrorKind::Timeout
                    } else {
                        ModelErrorKind::StreamCut
                    };
                    return Some(Err(error));
                }
            }
        }
    }
}

/// The event-stream parser: bytes in, whole events out.
#[derive(Default)]
struct Parser {
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
    /// Whether the last byte fed was a CR, so that an LF right after it
    /// ends no second line.
    after_cr: bool,
    /// Whether the first line was seen (a byte-order mark may open it).
    started: bool,
    /// The event being built.
    name: String,
    data: String,
    /// Whether a `data` field came (it may be empty).
    has_data: bool,
    /// Events complete and not yet taken.
    ready: VecDeque<Event>,
}

impl Parser {
    fn feed(&mut self, mut bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.partial.is_empty() {
                self.line(&bytes[..end]);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..end]);
                self.line(&line);
                line.clear();
                self.partial = line;
            }
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.partial.extend_from_slice(bytes);
    }

    /// One whole line, without its end.
    fn line(&mut self, mut line: &[u8]) {
        if !self.started {
            self.started = true;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch();
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return, // A comment.
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => self.name = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                let value = String::from_utf8_lossy(value);
                if self.has_data {
                    self.data.push('\n');
                    self.data.push_str(&value);
                } else {
                    self.data = value.into_owned();
                    self.has_data = true;
                }
            }
            _ => {} // id, retry, and fields the rules do not know.
        }
    }

    /// The blank line: the event built so far is complete, if it has data.
    fn dispatch(&mut self) {
        let name = std::mem::take(&mut self.name);
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        self.ready.push_back(Event {
            name: if name.is_empty() {
                "message".to_owned()
            } else {
                name
            },
            data: std::mem::take(&mut self.data),
        });
    }
}

/// The error for a stream that ended before its answer was complete.
pub(crate) fn cut() -> ModelError {
    ModelError::new(
        ModelErrorKind::StreamCut,
        "the model's stream ended before the answer was complete",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Vec<Event> {
        let mut parser = Parser::default();
        for chunk in chunks {
            parser.feed(chunk);
        }
        parser.ready.into_iter().collect()
    }

    fn event(name: &str, data: &str) -> Event {
        Event {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_are_read_as_the_rules_say() {
        let body: &[u8] = b"\xEF\xBB\xBFevent: a\ndata: 1\ndata:2\r\n\r\n: a comment\nid: 7\nretry: 10\nfoo: bar\ndata\n\ndata: x\revent: b\r\rdata: open at the end";
        assert_eq!(
            parse(&[body]),
            [event("a", "1\n2"), event("message", ""), event("b", "x")]
        );
    }

    #[test]
    fn the_same_events_come_however_the_body_is_cut() {
        let body: &[u8] = b"event: a\r\ndata: {\"x\": \"\xC3\xA9\"}\r\n\r\ndata: [DONE]\r\n\r\n";
        let whole = parse(&[body]);
        assert_eq!(
            whole,
            [
                event("a", "{\"x\": \"\u{e9}\"}"),
                event("message", "[DONE]")
            ]
        );
        for cut in 1..body.len() {
            assert_eq!(parse(&[&body[..cut], &body[cut..]]), whole, "cut at {cut}");
            assert_eq!(
                parse(&[&body[..cut], b"", &body[cut..]]),
                whole,
                "cut at {cut}, an empty chunk between"
            );
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(parse(&bytes), whole);
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_forgets_its_name() {
        assert_eq!(
            parse(&[b"event: a\n\ndata: 1\n\n"]),
            [event("message", "1")]
        );
    }

    #[test]
    fn many_short_lines_are_read_in_linear_time() {
        // 8 MiB of blank lines in one chunk: a parser that copies the rest
        // of its buffer at each line would move tens of terabytes.
        let mut body = vec![b'\n'; 8 << 20];
        body.extend_from_slice(b"data: end\n\n");
        assert_eq!(parse(&[&body]), [event("message", "end")]);
        // And one long line in many small pieces.
        let mut parser = Parser::default();
        parser.feed(b"data: ");
        for _ in 0..100_000 {
            parser.feed(b"xxxxxxxx");
        }
        parser.feed(b"\n\n");
        assert_eq!(parser.ready[0].data.len(), 800_000);
    }
}
