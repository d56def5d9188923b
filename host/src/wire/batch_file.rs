//! A batch read a call at a time: what `toolhost call --batch` holds in
//! memory is the calls in flight, those read ahead for them, and a 128-bit
//! hash per id (16 bytes; about 20 to 60 with the hash table's slack and
//! growth), whatever the batch's length.
//!
//! The batch is first copied into an unnamed temporary file of its own
//! (`$TMPDIR`, mode 0600, gone with the process; on a tmpfs that copy is in
//! memory too), which no other program opens by name, and read from there
//! twice:
//! - The first pass checks that the whole batch is JSON and learns the ids
//!   its calls give, holding nothing else. A batch with an error anywhere is
//!   refused before any of its calls runs, as
//!   [`parse_batch`](super::parse_batch) refuses it (the message may word the
//!   error differently: a trailing comma is called one).
//! - The second pass reads each call as [`parse_batch`](super::parse_batch)
//!   does (the same shapes, the same answers for elements that fit none,
//!   the same generated ids, unique against every id in the batch) and
//!   hands it on when the caller is ready for it.
//!
//! Only a JSON array is read this way. One call object or one assistant
//! message is one value, and is read whole, as before.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read, Seek as _};

use serde::de::{self, Deserializer as _, SeqAccess, Visitor};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::calls::{BatchError, array_element, given_id, parse_batch_at_most};
use crate::tool_call::{IdSet, ToolCall};

/// A batch, checked whole and read a call at a time.
#[derive(Debug)]
pub struct BatchFile {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A JSON array of `count` elements, in a file only this reads.
    /// `given` holds the ids its calls give, kept only when some call gives
    /// none and needs one made.
    Array {
        file: File,
        count: usize,
        given: Option<IdSet>,
    },
    /// One call object or one assistant message, read whole.
    Whole(Vec<ToolCall>),
}

/// How the second reading of a batch ended; known once its calls have all
/// been taken.
#[derive(Debug)]
pub struct Reading(oneshot::Receiver<Result<(), BatchError>>);

impl Reading {
    /// Whether the reading ended well: every call read, or the stream of
    /// calls dropped before its end (then the calls not taken were never
    /// read).
    ///
    /// # Errors
    ///
    /// [`BatchError::Unreadable`] when the copy of the batch could not be
    /// read again, or the reader stopped; the calls stop where it stopped.
    pub async fn finished(self) -> Result<(), BatchError> {
        self.0.await.unwrap_or_else(|_| {
            Err(BatchError::Unreadable(
                "reading the batch stopped before its end".to_owned(),
            ))
        })
    }
}

impl BatchFile {
    /// Copy the batch from `source` (a file, stdin, a pipe) and check it:
    /// a JSON array of calls, one call object or one assistant message.
    /// Blocking: it reads `source` to its end.
    ///
    /// # Errors
    ///
    /// [`BatchError::Unreadable`] when the batch is not JSON, is neither an
    /// array nor an object, or cannot be read or copied.
    pub fn open(mut source: impl Read) -> Result<Self, BatchError> {
        let copying = |e: std::io::Error| {
            BatchError::Unreadable(format!(
                "copying the batch into a temporary file (in $TMPDIR): {e}"
            ))
        };
        let mut file = tempfile::tempfile().map_err(copying)?;
        std::io::copy(&mut source, &mut file).map_err(copying)?;
        if first_byte(&file).map_err(unreadable)? != Some(b'[') {
            let mut text = String::new();
            from_start(&file)
                .and_then(|mut file| file.read_to_string(&mut text))
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::InvalidData => BatchError::Unreadable(
                        "the batch is not JSON: it is not UTF-8 text".to_owned(),
                    ),
                    _ => unreadable(e),
                })?;
            let calls = parse_batch_at_most(&text, usize::MAX)?;
            return Ok(Self {
                kind: Kind::Whole(calls),
            });
        }
        let mut given = IdSet::new();
        let mut unnamed = 0usize;
        // Blocks that are no call are skipped here as in the second pass:
        // their ids are not the batch's, and they are not counted.
        let mut count = 0usize;
        each_element(&file, |position, raw| {
            if array_element(position, raw).is_none() {
                return Ok(());
            }
            count += 1;
            match given_id(raw) {
                Some(id) => {
                    given.insert(&id);
                }
                None => unnamed += 1,
            }
            Ok(())
        })
        .map_err(not_json)?;
        Ok(Self {
            kind: Kind::Array {
                file,
                count,
                given: (unnamed > 0).then_some(given),
            },
        })
    }

    /// How many calls the batch has.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Array { count, .. } => *count,
            Kind::Whole(calls) => calls.len(),
        }
    }

    /// Whether the batch has no calls.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The calls in order, read on a thread of their own at most `ahead`
    /// calls before they are taken. Dropping the stream stops the reading.
    /// Must be called within a tokio runtime.
    pub fn calls(
        self,
        ahead: usize,
    ) -> (
        impl futures::Stream<Item = ToolCall> + Send + 'static,
        Reading,
    ) {
        use futures::StreamExt as _;
        let (done, reading) = oneshot::channel();
        let calls = match self.kind {
            Kind::Whole(calls) => {
                let _ = done.send(Ok(()));
                futures::stream::iter(calls).left_stream()
            }
            Kind::Array { file, count, given } => {
                let (sender, mut receiver) = mpsc::channel(ahead.max(1));
                tokio::task::spawn_blocking(move || {
                    let _ = done.send(read_calls(&file, count, given, &sender));
                });
                futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).right_stream()
            }
        };
        (calls, Reading(reading))
    }
}

/// The second pass: each element read as a call and sent, in order, until
/// the end or until the receiver is gone; blocks that are no call skipped,
/// as [`parse_batch`](super::parse_batch) skips them, so that a call's
/// generated id is its position among the calls. Never more calls than the
/// first pass counted.
fn read_calls(
    file: &File,
    count: usize,
    given: Option<IdSet>,
    sender: &mpsc::Sender<ToolCall>,
) -> Result<(), BatchError> {
    let given = given.unwrap_or_else(IdSet::new);
    let mut receiver_gone = false;
    let mut calls = 0usize;
    let read = each_element(file, |position, raw| {
        let Some(element) = array_element(position, raw) else {
            return Ok(());
        };
        calls += 1;
        if calls > count {
            return Err(format!("it had {count} tool calls when checked"));
        }
        let call = element.read().with_id(calls, &given);
        if sender.blocking_send(call).is_err() {
            receiver_gone = true;
            return Err("nobody takes the calls any more".to_owned());
        }
        Ok(())
    });
    match read {
        _ if receiver_gone => Ok(()),
        Ok(_) if calls == count => Ok(()),
        // The copy is the host's own: only a fault of the disk gets here.
        Ok(_) => Err(BatchError::Unreadable(format!(
            "the copy of the batch read differently the second time: {count} tool calls, then {calls}"
        ))),
        Err(e) => Err(BatchError::Unreadable(format!(
            "the copy of the batch read differently the second time: {e}"
        ))),
    }
}

fn unreadable(e: std::io::Error) -> BatchError {
    BatchError::Unreadable(format!("reading the batch: {e}"))
}

fn not_json(e: serde_json::Error) -> BatchError {
    if e.is_io() {
        return unreadable(e.into());
    }
    BatchError::Unreadable(format!("the batch is not JSON: {e}"))
}

/// `file`, to be read from its start.
fn from_start(mut file: &File) -> std::io::Result<&File> {
    file.rewind()?;
    Ok(file)
}

/// The first byte of `file` that is not JSON whitespace.
fn first_byte(file: &File) -> std::io::Result<Option<u8>> {
    let mut reader = BufReader::new(from_start(file)?);
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(None);
        }
        if let Some(&byte) = buffer
            .iter()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            return Ok(Some(byte));
        }
        let length = buffer.len();
        reader.consume(length);
    }
}

/// Call `each` with every element of the JSON array in `file` (from its
/// start) and its position from 1, holding one element at a time; then
/// check that nothing but whitespace follows the array. Returns how many
/// elements there were. An element is scanned without recursion, as
/// [`parse_batch`](super::parse_batch) scans it.
fn each_element(
    file: &File,
    each: impl FnMut(usize, &RawValue) -> Result<(), String>,
) -> Result<usize, serde_json::Error> {
    struct Elements<F>(F);

    impl<'de, F: FnMut(usize, &RawValue) -> Result<(), String>> Visitor<'de> for Elements<F> {
        type Value = usize;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON array of tool calls")
        }

        fn visit_seq<A: SeqAccess<'de>>(mut self, mut elements: A) -> Result<usize, A::Error> {
            let mut count = 0;
            while let Some(raw) = elements.next_element::<Box<RawValue>>()? {
                count += 1;
                (self.0)(count, &raw).map_err(de::Error::custom)?;
            }
            Ok(count)
        }
    }

    let file = from_start(file).map_err(serde_json::Error::io)?;
    let mut deserializer =
        serde_json::Deserializer::from_reader(BufReader::with_capacity(64 << 10, file));
    let count = (&mut deserializer).deserialize_seq(Elements(each))?;
    deserializer.end()?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use futures::StreamExt as _;
    use serde_json::{Value, json};

    use super::*;
    use crate::wire::parse_batch;

    /// Every call of the batch in `text`, read through a [`BatchFile`].
    async fn read(text: &str) -> Result<Vec<ToolCall>, BatchError> {
        let batch = BatchFile::open(text.as_bytes())?;
        let count = batch.len();
        let (calls, reading) = batch.calls(2);
        let calls: Vec<_> = calls.collect().await;
        reading.finished().await?;
        assert_eq!(calls.len(), count);
        Ok(calls)
    }

    #[tokio::test]
    async fn a_batch_file_reads_as_parse_batch_reads_the_same_text() {
        for text in [
            r#"[{"id":"a","name":"calc","args":{"x":1}}, {"name":"calc"}, 7, {"id":"call_2","type":"function","function":{"name":"calc","arguments":"{}"}}]"#,
            r#"[{"name":"calc"},{"id":"call_1","name":"calc"},{"id":"call_1_2","name":"calc"}]"#,
            r#"  [ ]  "#,
            r#"{"id":"one","name":"calc","args":{}}"#,
            r#"{"role":"assistant","tool_calls":[{"id":"m1","type":"function","function":{"name":"calc","arguments":"{}"}}]}"#,
            r#"[{"id":"a","id":"b","name":"calc"}, {"id":17,"name":"calc"}, {"id":null,"name":"calc"}, {"id":"x\"y","name":"calc","args":{}}]"#,
            r#"[{"\u0069d":"escaped key","name":"calc"}, {"id":"mcp","name":"calc","arguments":{}}, {"type":"tool_use","name":"calc","input":{}}]"#,
            // An Anthropic response's content array: only tool_use blocks
            // are calls; a skipped block's id is not the batch's.
            r#"[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","id":"call_1","text":"hi"},{"name":"calc"},{"type":"tool_use","id":"toolu_1","name":"calc","input":{}},{"type":"server_tool_use","id":"srv","name":"web_search","input":{}},{"name":"calc"},{"type":"image"}]"#,
            r#"{"type":"text","text":"only text"}"#,
            r#"[{"type":"text","text":"only text"}]"#,
        ] {
            assert_eq!(
                read(text).await.unwrap(),
                parse_batch(text).unwrap(),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn a_batch_that_is_not_json_anywhere_is_refused_before_any_call_is_read() {
        for (text, expected) in [
            (
                r#"[{"id":"a","name":"calc"}, {oops"#,
                "the batch is not JSON: key must be a string at line 1 column 29",
            ),
            (
                r#"[{"id":"a","name":"calc"}] trailing"#,
                "the batch is not JSON: trailing characters at line 1 column 28",
            ),
            (
                r#"[{"id":"a","name":"calc"}"#,
                "the batch is not JSON: EOF while parsing a list at line 1 column 25",
            ),
            (
                r#"[{"id":"a","name":"calc"},]"#,
                "the batch is not JSON: trailing comma at line 1 column 27",
            ),
            (
                "",
                "the batch is not JSON: EOF while parsing a value at line 1 column 0",
            ),
            (
                "42",
                "the batch must be a JSON array of tool calls, one tool call object, or an assistant message, not a number",
            ),
        ] {
            let error = BatchFile::open(text.as_bytes()).expect_err(text);
            assert_eq!(error.to_string(), expected, "{text}");
            assert!(parse_batch(text).is_err(), "{text}");
        }
        let error = BatchFile::open(&b"[{\"id\":\"\xff\"}]"[..]).err().unwrap();
        assert!(
            error
                .to_string()
                .starts_with("the batch is not JSON: invalid unicode"),
            "{error}"
        );
        let error = BatchFile::open(&b"{\"id\":\"\xff\"}"[..]).err().unwrap();
        assert_eq!(
            error.to_string(),
            "the batch is not JSON: it is not UTF-8 text"
        );
    }

    #[tokio::test]
    async fn blocks_that_are_no_call_are_skipped_and_not_counted() {
        let text = r#"[{"type":"text","text":"a"},{"name":"calc"},{"type":"thinking","thinking":"b"},{"name":"calc"}]"#;
        let batch = BatchFile::open(text.as_bytes()).unwrap();
        assert_eq!(batch.len(), 2);
        let calls = read(text).await.unwrap();
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2"]);
    }

    #[tokio::test]
    async fn generated_ids_avoid_ids_given_later_in_the_batch() {
        let calls = read(r#"[{"name":"calc"},{"id":"call_1","name":"calc"}]"#)
            .await
            .unwrap();
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1_2", "call_1"]);
    }

    /// The calls are those that were checked, whatever happens to the
    /// source afterwards: the batch is read from a copy of its own.
    #[tokio::test]
    async fn a_source_that_changes_after_the_check_changes_no_call() {
        let mut source = tempfile::tempfile().unwrap();
        source.write_all(br#"[{"id":"a","name":"calc"}]"#).unwrap();
        source.rewind().unwrap();
        let batch = BatchFile::open(source.try_clone().unwrap()).unwrap();
        source.set_len(0).unwrap();
        source.rewind().unwrap();
        source
            .write_all(br#"[{"id":"a","name":"calc"},{"id":"b","name":"write_file"},{"#)
            .unwrap();
        let (calls, reading) = batch.calls(1);
        let calls: Vec<_> = calls.collect().await;
        reading.finished().await.unwrap();
        assert_eq!(calls, parse_batch(r#"[{"id":"a","name":"calc"}]"#).unwrap());
    }

    #[tokio::test]
    async fn dropping_the_calls_stops_the_reading() {
        let calls: Vec<Value> = (0..1000)
            .map(|i| json!({"id": format!("c{i}"), "name": "calc"}))
            .collect();
        let text = serde_json::to_string(&calls).unwrap();
        let batch = BatchFile::open(text.as_bytes()).unwrap();
        let (calls, reading) = batch.calls(4);
        let first: Vec<_> = calls.take(3).collect().await;
        assert_eq!(first.len(), 3);
        // The reader found nobody to take the rest, and stopped without an
        // error.
        reading.finished().await.unwrap();
    }

    #[tokio::test]
    async fn a_deep_element_costs_only_its_own_call() {
        let deep = format!(
            r#"[{{"id":"deep","name":"calc","args":{}1{}}},{{"id":"next","name":"calc"}}]"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let calls = read(&deep).await.unwrap();
        assert_eq!(calls, parse_batch(&deep).unwrap());
        assert!(matches!(
            calls[0].arguments,
            crate::tool_call::Arguments::Malformed(_)
        ));
        assert_eq!(calls[1].id, "next");
    }

    mod properties {
        use futures::StreamExt as _;
        use proptest::prelude::*;

        use super::*;

        fn runtime() -> tokio::runtime::Runtime {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

            #[test]
            fn any_array_reads_as_parse_batch_reads_it(
                value in proptest::collection::vec(crate::wire::calls::tests::properties::element(), 0..6)
            ) {
                let text = serde_json::to_string(&value).unwrap();
                let read = runtime().block_on(read(&text)).unwrap();
                prop_assert_eq!(read, parse_batch(&text).unwrap());
            }

            /// Batches of objects with one to three of the keys that matter
            /// (an escaped one among them), about half of them broken by one
            /// inserted character: refused exactly when `parse_batch`
            /// refuses them; read to their end, and as `parse_batch` reads
            /// them, when it reads them.
            #[test]
            fn any_batch_is_refused_or_read_as_parse_batch_does(
                elements in proptest::collection::vec(
                    proptest::collection::vec(
                        (
                            prop::sample::select(vec![r#""id""#, r#""name""#, r#""args""#, r#""\u0069d""#]),
                            prop::sample::select(vec![r#""call_1""#, r#""call_2""#, r#""calc""#, "{}", "1", "null"]),
                        ),
                        1..4,
                    ),
                    0..5,
                ),
                broken in prop::option::of((
                    any::<prop::sample::Index>(),
                    prop::sample::select(vec![",", "]", "{", "\"", ":", "x", "\\"]),
                )),
            ) {
                let objects: Vec<String> = elements
                    .iter()
                    .map(|pairs| {
                        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                        format!("{{{}}}", pairs.join(","))
                    })
                    .collect();
                let mut text = format!("[{}]", objects.join(","));
                if let Some((at, inserted)) = broken {
                    let at = at.index(text.len() + 1);
                    text.insert_str(at, inserted);
                }
                let whole = parse_batch(&text);
                match BatchFile::open(text.as_bytes()) {
                    Ok(batch) => {
                        prop_assert!(whole.is_ok(), "{}: read, but parse_batch refuses it: {:?}", text, whole);
                        let calls = runtime().block_on(async {
                            let (calls, reading) = batch.calls(2);
                            let calls: Vec<_> = calls.collect().await;
                            reading.finished().await.map(|()| calls)
                        });
                        prop_assert_eq!(calls.unwrap(), whole.unwrap());
                    }
                    Err(error) => prop_assert!(
                        whole.is_err(),
                        "{}: refused ({}), but parse_batch reads it",
                        text,
                        error
                    ),
                }
            }
        }
    }
}
