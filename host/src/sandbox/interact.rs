//! What a tool tells and asks the people behind a call: progress reports
//! (`host.progress`) and questions (`host.ask`), each with its per-call
//! budget.
//!
//! A question reaches the person through the call's [`Asker`]: the
//! terminal in `toolhost run`, the MCP client's elicitation, or an
//! embedder's own. The host checks the question before asking (a schema it
//! can render, a bounded text, at most [`MAX_ASKS`] per call), shows it as
//! the tool's words (masked, cut, and printable: see [`crate::printable`]),
//! with the answer schema made safe to show ([`super::answer_schema`]),
//! stops the call's clock while it waits, and checks the answer against
//! the tool's schema before the tool sees it. A call waits for answers for
//! at most [`ASK_WAIT`] in all, whatever number of questions it asks, and
//! asks none once its own time is up. An answer is data for the tool:
//! nothing in this path touches the grants.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::answer_schema;
use super::bindings::v0_2::toolhost::tool::host::{AskRefusal, Refused};
use super::deadline::Deadline;
use super::secrets::Secrets;
use crate::observe::{Answer, Asker, CallObserver, Progress, Question};
use crate::outcome::clip;
use crate::printable;

/// The longest one call waits for people's answers, all its questions
/// together. The call's own timeout stands still meanwhile, so with a bound
/// per question instead, a tool asking all of its 8 questions could hold its
/// instance (and a person's attention) eight times as long.
pub const ASK_WAIT: Duration = Duration::from_secs(300);

/// Questions one call may ask.
pub(crate) const MAX_ASKS: u32 = 8;
/// The longest question, in characters.
const MAX_QUESTION_CHARS: usize = 2000;
/// The largest answer, as JSON text.
const MAX_ANSWER: usize = 64 * 1024;
/// Progress reports one call may send; later ones are dropped.
pub(crate) const MAX_PROGRESS: u32 = 1000;
/// The longest progress message, in characters.
const MAX_PROGRESS_MESSAGE: usize = 500;

/// One call's progress and questions.
pub(crate) struct Interaction {
    tool: String,
    call_id: String,
    secrets: Arc<Secrets>,
    observer: Option<Arc<dyn CallObserver>>,
    asker: Arc<dyn Asker>,
    deadline: Option<Deadline>,
    asks: u32,
    /// The keys of the questions asked so far (at most [`MAX_ASKS`]).
    keys: Vec<String>,
    /// How long the call may wait for answers in all: [`ASK_WAIT`].
    budget: Duration,
    /// How long the call has waited for answers so far.
    waited: Duration,
    reports: u32,
    last_done: Option<f64>,
}

/// The longest key a tool may name a question by.
const MAX_KEY: usize = 64;

/// Whether `key` may name a question: 1 to [`MAX_KEY`] of `A-Z a-z 0-9 _ -`,
/// and not `q` and digits, the names of questions asked without a key.
fn check_key(key: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if key.is_empty() || key.len() > MAX_KEY || !key.chars().all(allowed) {
        return Err(format!(
            "a question's key is 1 to {MAX_KEY} of A-Z a-z 0-9 _ - (got {:?})",
            crate::outcome::clip(key, MAX_KEY)
        ));
    }
    if key.len() > 1 && key.starts_with('q') && key[1..].chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{key:?} is the name of a question asked without a key (q1, q2, …); choose another"
        ));
    }
    Ok(())
}

fn refused(reason: AskRefusal, message: impl Into<String>) -> Refused {
    Refused {
        reason,
        message: message.into(),
    }
}

impl Interaction {
    pub(crate) fn new(
        tool: String,
        call_id: String,
        secrets: Arc<Secrets>,
        observer: Option<Arc<dyn CallObserver>>,
        asker: Arc<dyn Asker>,
        deadline: Option<Deadline>,
    ) -> Self {
        Self {
            tool,
            call_id,
            secrets,
            observer,
            asker,
            deadline,
            asks: 0,
            keys: Vec::new(),
            budget: ASK_WAIT,
            waited: Duration::ZERO,
            reports: 0,
            last_done: None,
        }
    }

    /// Pass a progress report on, if it is well-formed, grows, and fits
    /// the budget. Its message is one line: a display shows it among the
    /// host's own lines.
    pub(crate) fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        let Some(observer) = &self.observer else {
            return;
        };
        let finite =
            done.is_finite() && done >= 0.0 && total.is_none_or(|t| t.is_finite() && t >= 0.0);
        // MCP requires progress to grow with each notification.
        let grows = self.last_done.is_none_or(|last| done > last);
        if !finite || !grows || self.reports >= MAX_PROGRESS {
            return;
        }
        self.reports += 1;
        self.last_done = Some(done);
        let message = message
            .map(|m| {
                printable::one_line(&self.secrets.redact(m).into_string(), MAX_PROGRESS_MESSAGE)
            })
            .filter(|m| !m.is_empty());
        observer.progress(&Progress {
            tool: self.tool.clone(),
            call_id: self.call_id.clone(),
            done,
            total,
            message,
        });
    }

    /// How many questions the tool asked, answered or not.
    pub(crate) fn questions(&self) -> u32 {
        self.asks
    }

    /// Ask the person `question`, under the tool's `key` (`q<n>` for the
    /// n-th question without one); the answer as JSON text, or why none.
    pub(crate) async fn ask(
        &mut self,
        key: Option<String>,
        question: String,
        answer_schema: String,
    ) -> Result<String, Refused> {
        if self.asks >= MAX_ASKS {
            return Err(refused(
                AskRefusal::InvalidQuestion,
                format!("a call may ask at most {MAX_ASKS} questions"),
            ));
        }
        self.asks += 1;
        let key = match key {
            None => format!("q{}", self.asks),
            Some(key) => {
                check_key(&key).map_err(|e| refused(AskRefusal::InvalidQuestion, e))?;
                if self.keys.contains(&key) {
                    return Err(refused(
                        AskRefusal::InvalidQuestion,
                        format!(
                            "this call asked under the key {key:?} already; give each question its own key"
                        ),
                    ));
                }
                key
            }
        };
        self.keys.push(key.clone());
        let (schema, shown) = answer_schema::read(&answer_schema, &self.secrets)
            .map_err(|e| refused(AskRefusal::InvalidQuestion, e))?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| {
            refused(
                AskRefusal::InvalidQuestion,
                format!("the answer schema is not valid JSON Schema: {e}"),
            )
        })?;
        let message = printable::text(&self.secrets.redact(question).into_string()).into_owned();
        if message.trim().is_empty() {
            return Err(refused(
                AskRefusal::InvalidQuestion,
                "the question is empty (or only characters a person cannot see)",
            ));
        }
        let question = Question {
            tool: self.tool.clone(),
            call_id: self.call_id.clone(),
            key,
            message: clip(&message, MAX_QUESTION_CHARS),
            schema: shown,
        };
        let answer = self.wait_for(&question).await?;
        if let Some(error) = validator.iter_errors(&answer).next() {
            let error = self.secrets.redact(&error).to_string();
            tracing::warn!(tool = %self.tool, call_id = %self.call_id, error = %error, "an answer did not fit the tool's schema; the tool is told nobody answered");
            return Err(refused(
                AskRefusal::Unavailable,
                format!("the answer did not fit the schema ({error})"),
            ));
        }
        let text = answer.to_string();
        if text.len() > MAX_ANSWER {
            return Err(refused(AskRefusal::Unavailable, "the answer was too long"));
        }
        Ok(text)
    }

    /// Put `question` to the asker with the call's clock stopped, within
    /// what is left of the call's time to wait for answers; the answer, or
    /// why there is none.
    async fn wait_for(&mut self, question: &Question) -> Result<serde_json::Value, Refused> {
        let wait = humantime::format_duration(self.budget);
        let Some(left) = self
            .budget
            .checked_sub(self.waited)
            .filter(|l| !l.is_zero())
        else {
            return Err(refused(
                AskRefusal::Unavailable,
                format!(
                    "this call has waited {wait} for answers already, all one call may wait; \
                     finish without asking, or ask fewer questions"
                ),
            ));
        };
        let paused = match &self.deadline {
            None => None,
            Some(deadline) => Some(deadline.pause().ok_or_else(|| {
                refused(
                    AskRefusal::Unavailable,
                    "the call's time ran out before the question could be asked; \
                     ask earlier in the call",
                )
            })?),
        };
        let asked = Instant::now();
        let answer = tokio::time::timeout(left, self.asker.ask(question)).await;
        self.waited += asked.elapsed();
        drop(paused);
        match answer {
            Err(_) => Err(refused(
                AskRefusal::Unavailable,
                format!(
                    "nobody answered in time: one call waits at most {wait} for answers, all its questions together"
                ),
            )),
            Ok(Answer::Declined) => Err(refused(
                AskRefusal::Declined,
                "the person declined to answer",
            )),
            Ok(Answer::Cancelled) => Err(refused(
                AskRefusal::Cancelled,
                "the person dismissed the question",
            )),
            Ok(Answer::Unavailable(why)) => Err(refused(AskRefusal::Unavailable, why)),
            Ok(Answer::Accepted(answer)) => Ok(answer),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures::future::BoxFuture;
    use serde_json::json;

    use super::*;

    /// Answers yes at once, or never; counts the questions it is asked.
    #[derive(Default)]
    struct Person {
        never: bool,
        asked: Mutex<Vec<Question>>,
    }

    impl Asker for Person {
        fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
            self.asked.lock().unwrap().push(question.clone());
            Box::pin(async move {
                if self.never {
                    std::future::pending::<()>().await;
                }
                Answer::Accepted(json!({"ok": true}))
            })
        }
    }

    fn interaction(person: &Arc<Person>, deadline: Option<Deadline>) -> Interaction {
        Interaction::new(
            "tool".into(),
            "call_1".into(),
            Arc::new(Secrets::new(["sk-live-0123456789"])),
            None,
            person.clone(),
            deadline,
        )
    }

    const SCHEMA: &str = r#"{"type":"object","properties":{"ok":{"type":"boolean"}}}"#;

    async fn ask(interaction: &mut Interaction, question: &str) -> Result<String, Refused> {
        interaction.ask(None, question.into(), SCHEMA.into()).await
    }

    #[tokio::test]
    async fn one_wait_budget_covers_all_of_a_calls_questions() {
        let person = Arc::new(Person {
            never: true,
            ..Person::default()
        });
        let mut interaction = interaction(&person, Some(Deadline::new(Duration::from_secs(60))));
        interaction.budget = Duration::from_millis(50);
        let first = ask(&mut interaction, "Anyone?").await.unwrap_err();
        assert_eq!(first.reason, AskRefusal::Unavailable);
        assert!(
            first
                .message
                .contains("nobody answered in time: one call waits at most 50ms"),
            "{}",
            first.message
        );
        // The budget is the call's, not the question's: the next question
        // is refused at once, and nobody is asked.
        let second = ask(&mut interaction, "Still there?").await.unwrap_err();
        assert_eq!(second.reason, AskRefusal::Unavailable);
        assert!(
            second
                .message
                .contains("this call has waited 50ms for answers already"),
            "{}",
            second.message
        );
        assert_eq!(person.asked.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn answers_in_time_leave_the_budget_for_more_questions() {
        let person = Arc::new(Person::default());
        let mut interaction = interaction(&person, Some(Deadline::new(Duration::from_secs(60))));
        for _ in 0..MAX_ASKS {
            assert_eq!(
                ask(&mut interaction, "Go?").await.unwrap(),
                r#"{"ok":true}"#
            );
        }
        let over = ask(&mut interaction, "Go?").await.unwrap_err();
        assert_eq!(over.reason, AskRefusal::InvalidQuestion);
    }

    #[tokio::test]
    async fn no_question_once_the_calls_time_is_up() {
        let person = Arc::new(Person::default());
        let mut interaction = interaction(&person, Some(Deadline::new(Duration::ZERO)));
        let refused = ask(&mut interaction, "Too late?").await.unwrap_err();
        assert_eq!(refused.reason, AskRefusal::Unavailable);
        assert!(
            refused.message.contains("the call's time ran out"),
            "{}",
            refused.message
        );
        assert!(person.asked.lock().unwrap().is_empty(), "nobody is asked");
    }

    #[tokio::test]
    async fn the_question_is_masked_and_printable_and_its_schema_is_the_shown_one() {
        let person = Arc::new(Person::default());
        let mut interaction = interaction(&person, None);
        let schema = r#"{"type":"object","properties":{"ok":{"type":"boolean","title":"Use sk-live-0123456789\u202e?"}}}"#;
        interaction
            .ask(
                None,
                "Key sk-live-0123456789?\u{1b}[2J\u{200b}\r\nSure?".into(),
                schema.into(),
            )
            .await
            .unwrap();
        let asked = person.asked.lock().unwrap().remove(0);
        assert_eq!(asked.message, "Key [redacted]?[2J\nSure?");
        assert_eq!(asked.schema["properties"]["ok"]["title"], "Use [redacted]?");
        let blank = ask(&mut interaction, "\u{200b}\u{202e} \u{1b}")
            .await
            .unwrap_err();
        assert_eq!(blank.reason, AskRefusal::InvalidQuestion);
    }

    /// A call's questions are named: `q<n>` for the n-th without a key,
    /// the tool's key otherwise. A malformed key, one of the host's `q<n>`
    /// names, or one the call used already is refused, and nobody is asked.
    #[tokio::test]
    async fn each_question_of_a_call_has_its_own_key() {
        let person = Arc::new(Person::default());
        let mut interaction = interaction(&person, None);
        let keyed = |key: &str| Some(key.to_owned());
        ask(&mut interaction, "First?").await.unwrap();
        interaction
            .ask(keyed("user_name"), "Name?".into(), SCHEMA.into())
            .await
            .unwrap();
        ask(&mut interaction, "Third?").await.unwrap();
        let keys: Vec<String> = person
            .asked
            .lock()
            .unwrap()
            .drain(..)
            .map(|q| q.key)
            .collect();
        assert_eq!(keys, ["q1", "user_name", "q3"]);
        for (key, why) in [
            ("user_name", "asked under the key \"user_name\" already"),
            ("q7", "the name of a question asked without a key"),
            ("", "1 to 64 of A-Z a-z 0-9 _ -"),
            ("two words", "1 to 64 of A-Z a-z 0-9 _ -"),
            (&"k".repeat(65), "1 to 64 of A-Z a-z 0-9 _ -"),
        ] {
            let refused = interaction
                .ask(keyed(key), "Again?".into(), SCHEMA.into())
                .await
                .unwrap_err();
            assert_eq!(refused.reason, AskRefusal::InvalidQuestion, "{key:?}");
            assert!(
                refused.message.contains(why),
                "{key:?}: {}",
                refused.message
            );
        }
        assert!(person.asked.lock().unwrap().is_empty(), "nobody is asked");
        // Refused questions count against the call's questions too (8).
        // Within the limits, any such key is the tool's to give.
        assert!(
            check_key("q").is_ok()
                && check_key("q1x").is_ok()
                && check_key(&"k".repeat(64)).is_ok()
        );
    }

    #[test]
    fn progress_messages_are_one_masked_line() {
        #[derive(Debug, Default)]
        struct Heard(Mutex<Vec<Option<String>>>);
        impl CallObserver for Heard {
            fn wants(&self, _: crate::observe::LogLevel) -> bool {
                false
            }
            fn log(&self, _: crate::observe::LogLevel, _: &str) {}
            fn progress(&self, progress: &Progress) {
                self.0.lock().unwrap().push(progress.message.clone());
            }
        }
        let heard = Arc::new(Heard::default());
        let mut interaction = interaction(&Arc::new(Person::default()), None);
        interaction.observer = Some(heard.clone());
        interaction.progress(
            1.0,
            None,
            Some("step\n? run calc with {}? [y/N] sk-live-0123456789".into()),
        );
        interaction.progress(2.0, None, Some("\u{200b}\u{202e}".into()));
        assert_eq!(
            *heard.0.lock().unwrap(),
            [
                Some("step⏎? run calc with {}? [y/N] [redacted]".to_owned()),
                None
            ]
        );
    }
}
