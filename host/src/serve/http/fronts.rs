//! The threads HTTP connections are served on.
//!
//! Each connection lives on one front thread, a current-thread runtime of
//! its own: its requests are read, run and answered there, with no hand-off
//! between threads. On tokio's multi-thread runtime, hyper wakes a
//! connection's own task while it runs, once per request with a body (its
//! body channel), and a task woken while it runs is queued as a yield,
//! which wakes a parked worker to steal it: both workers woke for every
//! call, which cost a small call over HTTP about 40 µs on a 2-core machine
//! (issue 29, `docs/performance.md`).
//!
//! A new connection goes to the front thread serving the fewest. The calls
//! a batch or a program spreads, durable tasks and calls that wait for
//! their client's answers run on the workers of the runtime `serve` was
//! started on (`sandbox::spread`), so a batch still uses every core.
//!
//! On a current-thread runtime (no workers to spare), or with
//! `http_threads = 0`, connections are served on the runtime itself, as
//! tasks of their own.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio_util::sync::CancellationToken;

/// How long a front thread's tasks get to end once the server has stopped.
const STOP_TASKS: Duration = Duration::from_secs(1);

/// The most front threads per core `http_threads` may ask for.
const MOST_PER_CORE: usize = 4;

/// The front threads (none: connections run on the caller's runtime).
pub(super) struct Fronts {
    fronts: Vec<Front>,
    /// Where the search for the front serving the fewest starts, turn by
    /// turn, so that ties do not all go to the first.
    next: AtomicUsize,
    /// Joined once stopped.
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
    stop: CancellationToken,
}

/// One front thread: its runtime, and how many connections it serves.
struct Front {
    runtime: Handle,
    serving: Arc<AtomicUsize>,
}

impl Fronts {
    /// `threads` front threads; by default (`None`) as many as the current
    /// runtime has workers, and none on a current-thread runtime. Must be
    /// called within a tokio runtime.
    pub(super) fn start(threads: Option<usize>) -> std::io::Result<Self> {
        let workers = Handle::current();
        let count = threads.unwrap_or_else(|| match workers.runtime_flavor() {
            RuntimeFlavor::MultiThread => workers.metrics().num_workers(),
            _ => 0,
        });
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let most = cores.saturating_mul(MOST_PER_CORE);
        let count = if count > most {
            tracing::warn!(
                asked = count,
                serving = most,
                "more threads to serve HTTP were asked for than {MOST_PER_CORE} per core; serving on {most}"
            );
            most
        } else {
            count
        };
        let stop = CancellationToken::new();
        let mut fronts = Self {
            fronts: Vec::new(),
            next: AtomicUsize::new(0),
            threads: std::sync::Mutex::new(Vec::new()),
            stop: stop.clone(),
        };
        for n in 0..count {
            // On an error, dropping `fronts` stops the threads started.
            let (front, thread) = start_front(n, workers.clone(), stop.clone())?;
            fronts.fronts.push(front);
            fronts.threads_mut().push(thread);
        }
        Ok(fronts)
    }

    /// Serve `tcp` with `serve`, on the front thread serving the fewest
    /// connections (on this runtime when there are none).
    pub(super) fn spawn<F, Fut>(&self, tcp: tokio::net::TcpStream, serve: F)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.fronts.len();
        let Some(front) = (0..count)
            .map(|turn| &self.fronts[(start + turn) % count])
            .min_by_key(|front| front.serving.load(Ordering::Relaxed))
        else {
            tokio::spawn(serve(tcp));
            return;
        };
        // The socket moves to the front thread's own reactor, so that its
        // readiness wakes that thread alone.
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand a connection to a front thread; closed it");
                return;
            }
        };
        let serving = Serving::count(&front.serving);
        front.runtime.spawn(async move {
            let _serving = serving;
            match tokio::net::TcpStream::from_std(tcp) {
                Ok(tcp) => serve(tcp).await,
                Err(e) => tracing::warn!(error = %e, "cannot serve a connection on a front thread; closed it"),
            }
        });
    }

    /// Stop the front threads: what still runs there is dropped (every
    /// call was answered or stopped by then), and the threads are joined.
    pub(super) async fn stop_and_join(&self) {
        self.stop.cancel();
        let threads = std::mem::take(&mut *self.threads_mut());
        if threads.is_empty() {
            return;
        }
        // Joined on a thread of its own: the blocking pool may be full.
        let (joined, all_joined) = tokio::sync::oneshot::channel();
        let joiner = std::thread::Builder::new()
            .name("toolhost-http-join".into())
            .spawn(move || {
                for thread in threads {
                    let _ = thread.join();
                }
                let _ = joined.send(());
            });
        if joiner.is_ok() {
            let _ = all_joined.await;
        }
    }

    fn threads_mut(&self) -> std::sync::MutexGuard<'_, Vec<std::thread::JoinHandle<()>>> {
        self.threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Fronts {
    /// The threads end on their own once told to stop.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Start front thread `n`, which spreads its calls to `workers` and runs
/// until `stop`.
fn start_front(
    n: usize,
    workers: Handle,
    stop: CancellationToken,
) -> std::io::Result<(Front, std::thread::JoinHandle<()>)> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(format!("toolhost-http-{n}"))
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = sender.send(Err(e));
                    return;
                }
            };
            crate::sandbox::spread::spread_to(workers);
            let _ = sender.send(Ok(runtime.handle().clone()));
            runtime.block_on(stop.cancelled());
            runtime.shutdown_timeout(STOP_TASKS);
        })?;
    let runtime = receiver
        .recv()
        .map_err(|_| std::io::Error::other("a front thread ended as it started"))??;
    let front = Front {
        runtime,
        serving: Arc::new(AtomicUsize::new(0)),
    };
    Ok((front, thread))
}

/// One connection counted on its front thread, until dropped.
struct Serving(Arc<AtomicUsize>);

impl Serving {
    fn count(serving: &Arc<AtomicUsize>) -> Self {
        serving.fetch_add(1, Ordering::Relaxed);
        Self(serving.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Connections go to the front threads, the fewest-serving first, and
    /// each is served on its thread's own runtime.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_are_served_on_the_front_threads_in_turn() {
        let fronts = Fronts::start(None).unwrap();
        assert_eq!(fronts.fronts.len(), 2, "one front thread per worker");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            fronts.spawn(tcp, |mut tcp| async move {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                let flavor = Handle::current().runtime_flavor();
                let reply = format!("{name} {}", flavor == RuntimeFlavor::CurrentThread);
                tcp.write_all(reply.as_bytes()).await.unwrap();
                // Held open until the client closes: still serving.
                let _ = tcp.read(&mut [0u8; 1]).await;
            });
            clients.push(client);
        }
        let mut served = Vec::new();
        for client in &mut clients {
            let mut reply = vec![0u8; 64];
            let n = client.read(&mut reply).await.unwrap();
            served.push(String::from_utf8_lossy(&reply[..n]).into_owned());
        }
        served.sort();
        assert_eq!(
            served,
            [
                "toolhost-http-0 true",
                "toolhost-http-0 true",
                "toolhost-http-1 true",
                "toolhost-http-1 true"
            ]
        );
        drop(clients);
        tokio::time::timeout(Duration::from_secs(10), fronts.stop_and_join())
            .await
            .expect("the front threads end once stopped");
    }

    /// On a current-thread runtime there are no front threads: a
    /// connection is served on the runtime itself.
    #[tokio::test]
    async fn a_current_thread_runtime_serves_its_connections_itself() {
        let fronts = Fronts::start(None).unwrap();
        assert!(fronts.fronts.is_empty());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let here = std::thread::current().id();
        fronts.spawn(tcp, move |mut tcp| async move {
            let same = std::thread::current().id() == here;
            tcp.write_all(if same { b"same" } else { b"other" })
                .await
                .unwrap();
        });
        let mut reply = String::new();
        client.read_to_string(&mut reply).await.unwrap();
        assert_eq!(reply, "same");
        fronts.stop_and_join().await;
    }
}
