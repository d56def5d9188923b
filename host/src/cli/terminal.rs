//! The terminal a person answers at: one turn for everything printed from a
//! tool or a model and for every prompt, and one reader of stdin that hands
//! each line only to the prompt that asked for it.
//!
//! Why one reader: a prompt that read stdin on a thread of its own left
//! that read behind when it was abandoned (its call cancelled or out of
//! time), and the read then took the next line typed, such as the answer
//! meant for an approval. Here a single thread reads, and only while a
//! prompt waits; a line goes to the prompt on screen when it arrives, and
//! when none is (its prompt was withdrawn) it is dropped, never kept for
//! the next one. A prompt for an answer ([`Turn::answer`]) first discards
//! what was typed ahead of it, so nothing typed before the question could
//! be seen answers it.
//!
//! The reader starts with the first prompt, so a command that reads its
//! own input from stdin (`call --batch -`) and never prompts keeps it.
//!
//! Log lines are written by a thread of their own (`cli/log.rs`), not under
//! the turn; they go through [`Terminal::held_while_prompting`], which holds
//! them while a prompt waits for its line and lets them out when it is
//! answered or withdrawn. So a tool's log line (a tool logs through the
//! host, in parallel with the call that asks) can neither land inside an
//! approval prompt nor pass for the next one. A log line is written
//! holding the lock prompts are printed under, taken before it checks
//! that no prompt is open: a prompt that opens meanwhile is printed after
//! the line, never before it.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// The terminal of this process: stdin, with prompts on stderr.
pub(crate) static TERMINAL: LazyLock<Terminal> = LazyLock::new(Terminal::stdio);

/// The longest line read as one answer; the rest of a longer line is
/// dropped, so a paste of any size holds at most this much.
const MAX_LINE: u64 = 64 * 1024;

/// A terminal: whoever holds its turn prints, and reads, alone.
pub(crate) struct Terminal {
    turn: tokio::sync::Mutex<()>,
    lines: Lines,
    prompts: Mutex<Box<dyn Write + Send>>,
    prompting: Prompting,
}

impl Terminal {
    /// Lines from stdin, prompts on stderr.
    fn stdio() -> Self {
        Self::new(
            Lines::new(stdin_reader, discard_typed_ahead),
            Box::new(std::io::stderr()),
        )
    }

    /// Lines from `lines`, prompts and notices written to `prompts`.
    pub(crate) fn new(lines: Lines, prompts: Box<dyn Write + Send>) -> Self {
        Self {
            turn: tokio::sync::Mutex::new(()),
            lines,
            prompts: Mutex::new(prompts),
            prompting: Prompting::default(),
        }
    }

    /// `out`, for writers that print beside the turn (the log thread):
    /// each write waits while a prompt is on screen.
    pub(crate) fn held_while_prompting<W: Write>(&'static self, out: W) -> HeldWhilePrompting<W> {
        HeldWhilePrompting {
            terminal: self,
            out,
        }
    }

    /// The lock prompts are printed under, taken once no prompt is open
    /// (a prompt opened while it is held prints once it is let go).
    fn screen_between_prompts(&self) -> MutexGuard<'_, Box<dyn Write + Send>> {
        loop {
            let screen = self.prompts.lock().unwrap_or_else(PoisonError::into_inner);
            if self.prompting.none_open() {
                return screen;
            }
            drop(screen);
            self.prompting.wait_for_none();
        }
    }

    /// Wait for the terminal's turn: everything a run prints (the display,
    /// answers on stdout) and every prompt holds it, so that nothing is
    /// printed into a prompt and prompts never interleave.
    pub(crate) async fn turn(&self) -> Turn<'_> {
        Turn {
            terminal: self,
            _held: self.turn.lock().await,
        }
    }
}

/// The terminal's turn, held.
pub(crate) struct Turn<'a> {
    terminal: &'a Terminal,
    _held: tokio::sync::MutexGuard<'a, ()>,
}

impl Turn<'_> {
    /// Write `text` where prompts go.
    pub(crate) fn say(&self, text: &str) {
        let mut out = self
            .terminal
            .prompts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }

    /// Show `prompt` and wait for the line typed in answer to it (without
    /// its line ending); `None` at the end of input. What was typed before
    /// the prompt is discarded first. Dropping the future withdraws the
    /// prompt: a line that arrives later goes to no one.
    pub(crate) async fn answer(&self, prompt: &str) -> Option<String> {
        let _open = self.terminal.prompting.open();
        let request = self.terminal.lines.request(true);
        self.say(prompt);
        request.line().await
    }

    /// [`Turn::answer`] keeping what was typed ahead: for the next message
    /// of a chat, which a person may type while the last one is answered.
    pub(crate) async fn next_line(&self, prompt: &str) -> Option<String> {
        let _open = self.terminal.prompting.open();
        let request = self.terminal.lines.request(false);
        self.say(prompt);
        request.line().await
    }
}

/// Whether a prompt is on screen, for the writers that wait for it.
#[derive(Default)]
struct Prompting {
    /// Prompts on screen (one at a time under the turn; counted so that a
    /// withdrawn prompt's guard can never end its successor's hold).
    open: Mutex<usize>,
    /// Signalled when the last prompt on screen ends.
    ended: Condvar,
    /// Writers waiting for it.
    waiting: AtomicUsize,
}

impl Prompting {
    fn open(&self) -> PromptOpen<'_> {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        PromptOpen(self)
    }

    /// Whether no prompt is on screen now.
    fn none_open(&self) -> bool {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) == 0
    }

    /// Return once no prompt is on screen.
    fn wait_for_none(&self) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if *open == 0 {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let open = self
            .ended
            .wait_while(open, |open| *open > 0)
            .unwrap_or_else(PoisonError::into_inner);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        drop(open);
    }
}

/// A prompt on screen; dropping it (answered or withdrawn) ends it.
struct PromptOpen<'a>(&'a Prompting);

impl Drop for PromptOpen<'_> {
    fn drop(&mut self) {
        let mut open = self.0.open.lock().unwrap_or_else(PoisonError::into_inner);
        *open -= 1;
        if *open == 0 {
            self.0.ended.notify_all();
        }
    }
}

/// A writer whose writes wait while a prompt is on screen (see
/// [`Terminal::held_while_prompting`]). A whole buffer given to
/// `write_all`, a log line, waits once and is written in one piece.
pub(crate) struct HeldWhilePrompting<W> {
    terminal: &'static Terminal,
    out: W,
}

impl<W: Write> Write for HeldWhilePrompting<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let _screen = self.terminal.screen_between_prompts();
        self.out.write(data)
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        let _screen = self.terminal.screen_between_prompts();
        self.out.write_all(data)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// What a person types, a line at a time, read by one thread.
pub(crate) struct Lines {
    shared: Arc<Shared>,
    /// Opens the input on the reader's thread; taken when it starts.
    source: Mutex<Option<Source>>,
    /// Drops input that reached the process but was not read yet (for a
    /// terminal, what the kernel holds).
    discard_typed: Box<dyn Fn() + Send + Sync>,
}

type Source = Box<dyn FnOnce() -> Box<dyn Read + Send> + Send>;

struct Shared {
    state: Mutex<State>,
    /// Signalled when a prompt wants a line.
    wanted: Condvar,
}

#[derive(Default)]
struct State {
    want: Option<Want>,
    next_id: u64,
    /// The input ended or failed: every prompt gets `None` at once.
    ended: bool,
    /// Lines that arrived for no prompt, and were dropped.
    dropped: u64,
    /// The reader is waiting for input.
    reading: bool,
}

/// A prompt waiting for its line.
struct Want {
    id: u64,
    /// Discard what was read ahead before reading its line.
    fresh: bool,
    reply: oneshot::Sender<String>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Lines {
    /// Lines from what `open` returns, opened and read on a thread of
    /// their own once the first prompt asks; `discard_typed` drops input
    /// not read yet, before a prompt for an answer is shown.
    pub(crate) fn new<R: Read + Send + 'static>(
        open: impl FnOnce() -> R + Send + 'static,
        discard_typed: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                wanted: Condvar::new(),
            }),
            source: Mutex::new(Some(Box::new(move || {
                Box::new(open()) as Box<dyn Read + Send>
            }))),
            discard_typed: Box::new(discard_typed),
        }
    }

    /// Ask for the next line: from now on, a line that arrives is this
    /// request's (and replaces any earlier request, whose prompt is gone).
    fn request(&self, fresh: bool) -> Request<'_> {
        self.start();
        if fresh {
            (self.discard_typed)();
        }
        let (reply, line) = oneshot::channel();
        let mut state = self.shared.state();
        let id = state.next_id;
        state.next_id += 1;
        if !state.ended {
            state.want = Some(Want { id, fresh, reply });
        }
        drop(state);
        self.shared.wanted.notify_one();
        Request {
            shared: &self.shared,
            id,
            line,
        }
    }

    /// Start the reader, once.
    fn start(&self) {
        let Some(open) = self
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("toolhost-stdin".into())
            .spawn(move || read_lines(&shared, BufReader::new(open())));
        if started.is_err() {
            self.shared.state().ended = true;
        }
    }

    /// How many lines arrived for no prompt, and whether the reader is
    /// waiting for input.
    #[cfg(test)]
    fn seen(&self) -> (u64, bool) {
        let state = self.shared.state();
        (state.dropped, state.reading)
    }
}

/// One prompt's request for a line; dropping it withdraws the request.
struct Request<'a> {
    shared: &'a Shared,
    id: u64,
    line: oneshot::Receiver<String>,
}

impl Request<'_> {
    /// The line, or `None` at the end of input.
    async fn line(mut self) -> Option<String> {
        let line = (&mut self.line).await.ok()?;
        Some(line.trim_end_matches(['\n', '\r']).to_owned())
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if state.want.as_ref().is_some_and(|want| want.id == self.id) {
            state.want = None;
        }
    }
}

/// The reader's thread: while a prompt wants a line, read one and give it
/// to the prompt that wants it when it arrives, if any.
fn read_lines(shared: &Shared, mut reader: BufReader<Box<dyn Read + Send>>) {
    loop {
        let fresh = {
            let mut state = shared.state();
            loop {
                if let Some(want) = &mut state.want {
                    break std::mem::take(&mut want.fresh);
                }
                state = shared
                    .wanted
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        if fresh {
            // Lines read ahead together with an earlier one (a paste).
            let buffered = reader.buffer().len();
            reader.consume(buffered);
        }
        shared.state().reading = true;
        let line = read_line(&mut reader);
        let mut state = shared.state();
        state.reading = false;
        match line {
            Ok(Some(line)) => {
                let delivered = state
                    .want
                    .take()
                    .is_some_and(|want| want.reply.send(line).is_ok());
                if !delivered {
                    state.dropped += 1;
                }
            }
            Ok(None) | Err(_) => {
                state.ended = true;
                // Its sender dropped, the waiting prompt gets `None`.
                state.want = None;
                return;
            }
        }
    }
}

/// One line (lossily UTF-8), at most [`MAX_LINE`] bytes of it; `None` at
/// the end of input.
fn read_line(reader: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut bytes = Vec::new();
    let read = reader
        .by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', &mut bytes)?;
    if read == 0 {
        return Ok(None);
    }
    if !bytes.ends_with(b"\n") {
        // Past the cap: drop the rest of the line.
        loop {
            let buffer = reader.fill_buf()?;
            if buffer.is_empty() {
                break;
            }
            match buffer.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    reader.consume(at + 1);
                    break;
                }
                None => {
                    let all = buffer.len();
                    reader.consume(all);
                }
            }
        }
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Stdin read directly (a duplicate of its descriptor), past the standard
/// library's own buffer, so that discarding what was read ahead is only
/// ever this module's business.
fn stdin_reader() -> Box<dyn Read + Send> {
    use std::os::fd::AsFd as _;
    match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(std::io::stdin()),
    }
}

/// Drop what was typed at the terminal but not read yet (the kernel's
/// input queue, an unfinished line included). Nothing to do for a pipe:
/// its input was written by a program, not typed ahead by a person.
fn discard_typed_ahead() {
    use std::io::IsTerminal as _;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        let _ = rustix::termios::tcflush(&stdin, rustix::termios::QueueSelector::IFlush);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Input a test types, chunk by chunk; ends when the sender is dropped.
    pub(crate) struct Keyboard {
        chunks: mpsc::Receiver<Vec<u8>>,
        pending: Vec<u8>,
    }

    impl Read for Keyboard {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.pending.is_empty() {
                match self.chunks.recv() {
                    Ok(chunk) => self.pending = chunk,
                    Err(_) => return Ok(0),
                }
            }
            let n = out.len().min(self.pending.len());
            out[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            Ok(n)
        }
    }

    /// What a test's terminal printed.
    #[derive(Clone, Default)]
    pub(crate) struct Screen(Arc<Mutex<Vec<u8>>>);

    impl Screen {
        pub(crate) fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    impl Write for Screen {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A terminal for a test: what it types, what it sees, and the count
    /// of times typed-ahead input was discarded.
    pub(crate) fn terminal() -> (&'static Terminal, mpsc::Sender<Vec<u8>>, Screen) {
        let (typed, chunks) = mpsc::channel();
        let screen = Screen::default();
        let lines = Lines::new(
            move || Keyboard {
                chunks,
                pending: Vec::new(),
            },
            || {},
        );
        let terminal = Box::leak(Box::new(Terminal::new(lines, Box::new(screen.clone()))));
        (terminal, typed, screen)
    }

    fn typed(text: &str) -> Vec<u8> {
        text.as_bytes().to_vec()
    }

    /// Wait until `check` holds of what the reader has seen.
    async fn until(terminal: &Terminal, what: &str, check: impl Fn((u64, bool)) -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while !check(terminal.lines.seen()) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(waited.await.is_ok(), "the reader never {what}");
    }

    /// `prompt`'s answer, or a failed test if it takes more than 30 s (a
    /// prompt waiting for a line nobody types).
    pub(crate) async fn within<T>(prompt: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), prompt)
            .await
            .expect("the prompt got its line")
    }

    /// Wait until the reader dropped `n` lines in all.
    pub(crate) async fn dropped(terminal: &Terminal, n: u64) {
        until(terminal, &format!("dropped {n} lines"), |(dropped, _)| {
            dropped >= n
        })
        .await;
    }

    /// Run `prompt` until the reader waits for its line, then drop it, as
    /// a call that stops waiting drops its prompt.
    pub(crate) async fn abandon<T>(terminal: &Terminal, prompt: impl Future<Output = T>) {
        let mut prompt = std::pin::pin!(prompt);
        let reading = until(terminal, "waited for input", |(_, reading)| reading);
        tokio::select! {
            _ = &mut prompt => panic!("the prompt was answered"),
            () = reading => {}
        }
    }

    #[tokio::test]
    async fn a_line_goes_to_the_prompt_that_asked_for_it() {
        let (terminal, keyboard, screen) = terminal();
        let turn = terminal.turn().await;
        let answer = turn.answer("? go [y/N] ");
        keyboard.send(typed("y\r\n")).unwrap();
        assert_eq!(within(answer).await.as_deref(), Some("y"));
        assert_eq!(screen.text(), "? go [y/N] ");
    }

    #[tokio::test]
    async fn a_line_for_a_withdrawn_prompt_never_answers_the_next() {
        let (terminal, keyboard, _) = terminal();
        let turn = terminal.turn().await;
        // The first prompt starts waiting, then is abandoned (its call
        // timed out) while the reader is blocked on the keyboard.
        abandon(terminal, turn.answer("? the tool asks: type y ")).await;
        keyboard.send(typed("y\n")).unwrap();
        dropped(terminal, 1).await;
        let approval = turn.answer("? run wipe with {}? [y/N] ");
        keyboard.send(typed("n\n")).unwrap();
        assert_eq!(within(approval).await.as_deref(), Some("n"));
    }

    #[tokio::test]
    async fn lines_typed_ahead_of_an_answer_are_discarded_but_a_chat_keeps_them() {
        let (terminal, keyboard, _) = terminal();
        let turn = terminal.turn().await;
        // Two lines in one read: a paste. The chat takes the first; the
        // second was typed ahead of the approval and must not answer it.
        let chat = turn.next_line("you> ");
        keyboard.send(typed("hello\ny\n")).unwrap();
        assert_eq!(within(chat).await.as_deref(), Some("hello"));
        let approval = turn.answer("? run wipe with {}? [y/N] ");
        keyboard.send(typed("n\n")).unwrap();
        assert_eq!(within(approval).await.as_deref(), Some("n"));
        // A chat prompt keeps what was typed ahead of it.
        let chat = turn.next_line("you> ");
        keyboard.send(typed("one\ntwo\n")).unwrap();
        assert_eq!(within(chat).await.as_deref(), Some("one"));
        assert_eq!(
            within(turn.next_line("you> ")).await.as_deref(),
            Some("two")
        );
    }

    #[tokio::test]
    async fn the_end_of_input_answers_every_prompt_with_none() {
        let (terminal, keyboard, _) = terminal();
        let turn = terminal.turn().await;
        let answer = turn.answer("? ");
        keyboard.send(typed("partial")).unwrap();
        drop(keyboard);
        assert_eq!(within(answer).await.as_deref(), Some("partial"));
        assert_eq!(within(turn.answer("? ")).await, None);
        assert_eq!(within(turn.next_line("you> ")).await, None);
    }

    #[tokio::test]
    async fn an_endless_line_is_cut_and_the_next_line_is_whole() {
        let (terminal, keyboard, _) = terminal();
        let turn = terminal.turn().await;
        let answer = turn.answer("? ");
        let long = "x".repeat(usize::try_from(MAX_LINE).unwrap() * 3);
        keyboard.send(typed(&format!("{long}\n"))).unwrap();
        assert_eq!(
            within(answer).await.map(|l| l.len()),
            Some(usize::try_from(MAX_LINE).unwrap())
        );
        let next = turn.next_line("? ");
        keyboard.send(typed("next\n")).unwrap();
        assert_eq!(within(next).await.as_deref(), Some("next"));
    }

    #[tokio::test]
    async fn a_log_line_written_while_a_prompt_is_open_waits_until_it_is_answered() {
        let (terminal, keyboard, screen) = terminal();
        let turn = terminal.turn().await;
        let answer = turn.answer("? run wipe with {}? [y/N] ");
        let mut answer = std::pin::pin!(answer);
        // The prompt is on screen once the reader waits for its line.
        let reading = until(terminal, "waited for input", |(_, reading)| reading);
        tokio::select! {
            _ = &mut answer => panic!("the prompt was answered"),
            () = reading => {}
        }
        // A tool logs from the log thread while the person reads.
        let mut log = terminal.held_while_prompting(screen.clone());
        let writer = std::thread::spawn(move || {
            log.write_all(b"WARN tool=wipe approved: y\n").unwrap();
        });
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while terminal.prompting.waiting.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(waited.await.is_ok(), "the log line never waited");
        assert_eq!(screen.text(), "? run wipe with {}? [y/N] ");
        keyboard.send(typed("n\n")).unwrap();
        assert_eq!(within(answer).await.as_deref(), Some("n"));
        writer.join().unwrap();
        assert_eq!(
            screen.text(),
            "? run wipe with {}? [y/N] WARN tool=wipe approved: y\n"
        );
    }

    /// A writer that lets a test hold a write in the middle of writing.
    struct Gate {
        screen: Screen,
        entered: mpsc::Sender<()>,
        go: mpsc::Receiver<()>,
    }

    impl Write for Gate {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.entered.send(()).unwrap();
            self.go.recv().unwrap();
            self.screen.write(data)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Regression: a log line that had checked for a prompt let go of its
    /// check before writing, so a prompt opening in that instant was
    /// printed first and the line landed inside it. A prompt opening while
    /// a line is written now prints after it.
    #[tokio::test]
    async fn a_prompt_opening_while_a_log_line_is_written_prints_after_it() {
        let (terminal, keyboard, screen) = terminal();
        let (entered, entered_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let mut log = terminal.held_while_prompting(Gate {
            screen: screen.clone(),
            entered,
            go: go_rx,
        });
        let writer = std::thread::spawn(move || log.write_all(b"WARN tool=wipe approved: y\n"));
        // The line has checked that no prompt is open, and is being written.
        entered_rx.recv().unwrap();
        let release = std::thread::spawn(move || {
            while terminal.prompting.none_open() {
                std::thread::yield_now();
            }
            // The prompt is open. Without the fix it prints at once; give
            // it the time to (with the fix it waits for the line), then
            // let the line end.
            std::thread::sleep(Duration::from_millis(200));
            go.send(()).unwrap();
        });
        let turn = terminal.turn().await;
        let answer = turn.answer("? run wipe? [y/N] ");
        let mut answer = std::pin::pin!(answer);
        let reading = until(terminal, "waited for input", |(_, reading)| reading);
        tokio::select! {
            _ = &mut answer => panic!("the prompt was answered"),
            () = reading => {}
        }
        release.join().unwrap();
        keyboard.send(typed("n\n")).unwrap();
        assert_eq!(within(answer).await.as_deref(), Some("n"));
        writer.join().unwrap().unwrap();
        assert_eq!(
            screen.text(),
            "WARN tool=wipe approved: y\n? run wipe? [y/N] "
        );
    }

    #[tokio::test]
    async fn a_withdrawn_prompt_lets_held_log_lines_out() {
        let (terminal, _keyboard, screen) = terminal();
        let turn = terminal.turn().await;
        abandon(terminal, turn.answer("? the tool asks: name ")).await;
        // Withdrawn: nothing is on screen, a line is written at once.
        terminal
            .held_while_prompting(screen.clone())
            .write_all(b"after\n")
            .unwrap();
        assert!(screen.text().ends_with("after\n"));
    }

    #[tokio::test]
    async fn nothing_is_read_before_the_first_prompt() {
        let (terminal, keyboard, _) = terminal();
        keyboard.send(typed("batch input\n")).unwrap();
        // No prompt yet: the reader has not started, and nothing is taken.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(terminal.lines.seen(), (0, false));
        assert!(terminal.lines.source.lock().unwrap().is_some());
        let turn = terminal.turn().await;
        assert_eq!(
            within(turn.next_line("? ")).await.as_deref(),
            Some("batch input")
        );
    }
}
