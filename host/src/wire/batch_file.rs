//! A batch read from a file a call at a time: what `toolhost call --batch`
//! holds is the calls in flight and 16 bytes per id, whatever the batch's
//! length.
//!
//! The file is read twice:
//! - The first pass checks that the whole batch is JSON and learns the ids
//!   its calls give, holding nothing else. A batch with an error anywhere is
//!   refused before any of its calls runs, with the message
//!   [`parse_batch`](super::parse_batch) gives.
//! - The second pass reads each call as [`parse_batch`](super::parse_batch)
//!   does (the same shapes, the same answers for elements that fit none,
//!   the same generated ids, unique against every id in the batch) and
//!   hands it on when the caller is ready for it.
//!
//! Only a JSON array is read this way. One call object or one assistant
//! message is one value, and is read whole.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Seek as _};

use serde::de::{self, Deserializer as _, SeqAccess, Visitor};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::calls::{BatchError, Element, given_id, parse_batch_at_most};
use crate::tool_call::{IdSet, ToolCall};

/// A batch in a file, checked whole and read a call at a time.
#[derive(Debug)]
pub struct BatchFile {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A JSON array of `count` elements. `given` holds the ids its calls
    /// give, kept only when some call gives none and needs one made.
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
    /// Whether every call in the batch was read.
    ///
    /// # Errors
    ///
    /// [`BatchError::Unreadable`] when the file changed after it was
    /// checked, so the calls read stop where it stopped being readable.
    pub async fn finished(self) -> Result<(), BatchError> {
        self.0.await.unwrap_or_else(|_| {
            Err(BatchError::Unreadable(
                "reading the batch stopped before its end".to_owned(),
            ))
        })
    }
}

impl BatchFile {
    /// Check the batch in `file`, read from its start: a JSON array of
    /// calls, one call object or one assistant message. `file` must be a
    /// regular file, as it is read again by [`BatchFile::calls`]; copy a pipe
    /// to a temporary file first.
    ///
    /// # Errors
    ///
    /// [`BatchError::Unreadable`] when the batch is not JSON, is neither an
    /// array nor an object, or cannot be read.
    pub fn open(mut file: File) -> Result<Self, BatchError> {
        let unreadable =
            |e: std::io::Error| BatchError::Unreadable(format!("reading the batch: {e}"));
        let first = first_byte(&mut file).map_err(unreadable)?;
        file.rewind().map_err(unreadable)?;
        if first != Some(b'[') {
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(unreadable)?;
            let calls = parse_batch_at_most(&text, usize::MAX)?;
            return Ok(Self {
                kind: Kind::Whole(calls),
            });
        }
        let mut given = IdSet::new();
        let mut unnamed = 0usize;
        let count = each_element(&file, |_, raw| {
            match given_id(raw) {
                Some(id) => {
                    given.insert(&id);
                }
                None => unnamed += 1,
            }
            Ok(())
        })
        .map_err(not_json)?;
        file.rewind().map_err(unreadable)?;
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
        let (sender, mut receiver) = mpsc::channel(ahead.max(1));
        let (done, reading) = oneshot::channel();
        match self.kind {
            Kind::Whole(calls) => {
                tokio::spawn(async move {
                    for call in calls {
                        if sender.send(call).await.is_err() {
                            break;
                        }
                    }
                    let _ = done.send(Ok(()));
                });
            }
            Kind::Array { file, count, given } => {
                tokio::task::spawn_blocking(move || {
                    let _ = done.send(read_calls(&file, count, given, &sender));
                });
            }
        }
        let calls = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
        (calls, Reading(reading))
    }
}

/// The second pass: each element read as a call and sent, in order, until
/// the end or until the receiver is gone.
fn read_calls(
    file: &File,
    count: usize,
    given: Option<IdSet>,
    sender: &mpsc::Sender<ToolCall>,
) -> Result<(), BatchError> {
    let mut start = file;
    start
        .rewind()
        .map_err(|e| BatchError::Unreadable(format!("reading the batch: {e}")))?;
    let mut taken = given.unwrap_or_else(IdSet::new);
    let mut receiver_gone = false;
    let read = each_element(file, |position, raw| {
        let label = format!("tool call #{position}");
        let call = Element::call(label, raw)
            .read()
            .with_id(position, &mut taken);
        if sender.blocking_send(call).is_err() {
            receiver_gone = true;
            return Err("nobody takes the calls any more".to_owned());
        }
        Ok(())
    });
    match read {
        _ if receiver_gone => Ok(()),
        Ok(read) if read == count => Ok(()),
        Ok(read) => Err(BatchError::Unreadable(format!(
            "the batch changed while it was read: it had {count} tool calls, then {read}"
        ))),
        Err(e) => Err(BatchError::Unreadable(format!(
            "the batch changed while it was read: {}",
            not_json(e)
        ))),
    }
}

fn not_json(e: serde_json::Error) -> BatchError {
    BatchError::Unreadable(if e.is_io() {
        format!("reading the batch: {e}")
    } else {
        format!("the batch is not JSON: {e}")
    })
}

/// The first byte of `file` that is not JSON whitespace.
fn first_byte(file: &mut File) -> std::io::Result<Option<u8>> {
    let mut reader = BufReader::new(file);
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
/// position) and its position from 1, holding one element at a time; then
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

    fn file(text: &str) -> File {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file.rewind().unwrap();
        file
    }

    /// Every call of the batch in `text`, read through a [`BatchFile`].
    async fn read(text: &str) -> Result<Vec<ToolCall>, BatchError> {
        let batch = BatchFile::open(file(text))?;
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
        ] {
            assert_eq!(
                read(text).await.unwrap(),
                parse_batch(text).unwrap(),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn a_batch_file_that_is_not_json_anywhere_is_refused_before_any_call_is_read() {
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
                "",
                "the batch is not JSON: EOF while parsing a value at line 1 column 0",
            ),
            (
                "42",
                "the batch must be a JSON array of tool calls, one tool call object, or an assistant message, not a number",
            ),
        ] {
            let error = BatchFile::open(file(text)).err().expect(text);
            assert_eq!(error.to_string(), expected, "{text}");
            if !text.is_empty() && text.starts_with('[') {
                assert_eq!(
                    parse_batch(text).unwrap_err(),
                    expected,
                    "the same message as a batch read whole"
                );
            }
        }
    }

    #[tokio::test]
    async fn generated_ids_avoid_ids_given_later_in_the_file() {
        let calls = read(r#"[{"name":"calc"},{"id":"call_1","name":"calc"}]"#)
            .await
            .unwrap();
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1_2", "call_1"]);
    }

    #[tokio::test]
    async fn a_file_that_changes_between_the_readings_ends_the_calls_with_an_error() {
        let mut changing = file(r#"[{"id":"a","name":"calc"},{"id":"b","name":"calc"}]"#);
        let batch = BatchFile::open(changing.try_clone().unwrap()).unwrap();
        changing.set_len(0).unwrap();
        changing
            .write_all(br#"[{"id":"a","name":"calc"},{"#)
            .unwrap();
        let (calls, reading) = batch.calls(1);
        let calls: Vec<_> = calls.collect().await;
        assert_eq!(calls.len(), 1);
        let error = reading.finished().await.unwrap_err().to_string();
        assert!(
            error.starts_with("the batch changed while it was read: the batch is not JSON"),
            "{error}"
        );

        let shorter = file(r#"[{"id":"a","name":"calc"},{"id":"b","name":"calc"}]"#);
        let batch = BatchFile::open(shorter.try_clone().unwrap()).unwrap();
        shorter.set_len(0).unwrap();
        (&shorter)
            .write_all(br#"[{"id":"a","name":"calc"}]"#)
            .unwrap();
        let (calls, reading) = batch.calls(1);
        assert_eq!(calls.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(
            reading.finished().await.unwrap_err().to_string(),
            "the batch changed while it was read: it had 2 tool calls, then 1"
        );
    }

    #[tokio::test]
    async fn dropping_the_calls_stops_the_reading() {
        let calls: Vec<Value> = (0..1000)
            .map(|i| json!({"id": format!("c{i}"), "name": "calc"}))
            .collect();
        let batch = BatchFile::open(file(&serde_json::to_string(&calls).unwrap())).unwrap();
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

    mod prop {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
            #[test]
            fn any_array_reads_as_parse_batch_reads_it(
                value in proptest::collection::vec(crate::wire::calls::tests::properties::element(), 0..6)
            ) {
                let text = serde_json::to_string(&value).unwrap();
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let read = runtime.block_on(read(&text)).unwrap();
                prop_assert_eq!(read, parse_batch(&text).unwrap());
            }
        }
    }
}
