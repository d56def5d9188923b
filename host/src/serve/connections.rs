//! What a peer can make the HTTP server hold before it has said who it is:
//! connections, and the bytes of their unfinished requests.
//!
//! - **Header bytes.** A connection's read buffer holds at most
//!   [`MAX_HEADER_BYTES`]; headers that do not fit are answered 431 and the
//!   connection closed (hyper's default buffer is about 400 KiB, which let
//!   300 connections with unfinished headers grow the server by 114 MiB).
//! - **Connections.** At most [`MAX_CONNECTIONS`] at once, and at most
//!   [`MAX_PER_PEER`] from one address.
//! - **Room for a well-behaved client during a flood.** At either cap, a
//!   new connection sheds the oldest connection that has no request in
//!   progress (it is still sending its headers, or idles between
//!   requests) instead of being refused. A flood of half-open connections
//!   therefore only ever replaces itself, while a client that sends its
//!   request at once is busy, and kept, as soon as its headers are in. Only
//!   when every connection is busy with a request is a new one refused.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Connections open at once. Each holds a descriptor (which the tools'
/// descriptor pool must not run short of) and up to [`MAX_HEADER_BYTES`]
/// of buffered request.
pub(super) const MAX_CONNECTIONS: usize = 1024;

/// Connections one peer address may hold: a quarter of the whole, so one
/// address cannot take every slot (though many addresses can, until the
/// oldest idle ones are shed).
pub(super) const MAX_PER_PEER: usize = MAX_CONNECTIONS / 4;

/// The most bytes of request head (request line and headers) a connection
/// buffers: room for a long bearer token and every MCP header, and small
/// enough that all connections together hold a few MiB.
pub(super) const MAX_HEADER_BYTES: usize = 16 << 10;

/// The open connections, oldest first.
#[derive(Debug, Default)]
pub(super) struct Connections {
    table: Mutex<Table>,
    /// Woken when the last connection closes.
    closed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Table {
    /// By a number that grows with each connection: oldest first.
    open: BTreeMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
    next: u64,
}

#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    /// Requests in progress on the connection: from its headers being read
    /// to its response's last byte.
    busy: Arc<AtomicUsize>,
    /// Closes the connection when it is shed.
    shed: CancellationToken,
}

impl Table {
    /// Forget `id`, returning its entry.
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(count) = self.per_peer.get_mut(&entry.peer) {
            *count -= 1;
            if *count == 0 {
                self.per_peer.remove(&entry.peer);
            }
        }
        Some(entry)
    }

    /// Shed the oldest idle connection that `matches`; whether one was.
    fn shed_oldest_idle(&mut self, matches: impl Fn(&Entry) -> bool) -> bool {
        let victim = self
            .open
            .iter()
            .find(|(_, entry)| matches(entry) && entry.busy.load(Ordering::Acquire) == 0)
            .map(|(&id, _)| id);
        match victim.and_then(|id| self.remove(id)) {
            Some(entry) => {
                entry.shed.cancel();
                true
            }
            None => false,
        }
    }
}

/// Why a connection was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// This address holds [`MAX_PER_PEER`] connections, all busy.
    Peer,
    /// The server holds [`MAX_CONNECTIONS`], all busy.
    Full,
}

impl Refused {
    /// The `reason` label `/metrics` counts it under.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Self::Peer => "connections_per_peer",
            Self::Full => "connections",
        }
    }
}

impl Connections {
    /// Take a connection from `peer`, shedding an idle one to make room if
    /// a cap is reached.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refused> {
        let mut table = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.per_peer.get(&peer).copied().unwrap_or(0) >= MAX_PER_PEER
            && !table.shed_oldest_idle(|entry| entry.peer == peer)
        {
            return Err(Refused::Peer);
        }
        if table.open.len() >= MAX_CONNECTIONS && !table.shed_oldest_idle(|_| true) {
            return Err(Refused::Full);
        }
        let id = table.next;
        table.next += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        let shed = CancellationToken::new();
        table.open.insert(
            id,
            Entry {
                peer,
                busy: busy.clone(),
                shed: shed.clone(),
            },
        );
        *table.per_peer.entry(peer).or_default() += 1;
        Ok(Admitted {
            id,
            connections: self.clone(),
            busy,
            shed,
        })
    }

    /// How many connections are open.
    fn open(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .open
            .len()
    }

    /// Resolves once every connection has closed.
    pub(super) async fn all_closed(&self) {
        loop {
            let closed = self.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }
}

/// One connection's place in the table; freed when dropped.
#[derive(Debug)]
pub(super) struct Admitted {
    id: u64,
    connections: Arc<Connections>,
    busy: Arc<AtomicUsize>,
    shed: CancellationToken,
}

impl Admitted {
    /// Resolves when the connection was shed to make room for another.
    pub(super) fn shed(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.shed.cancelled()
    }

    /// Mark a request in progress until the returned guard is dropped
    /// (with its response's last byte): a busy connection is never shed.
    pub(super) fn busy(&self) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.busy.clone())
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut table = self
            .connections
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        table.remove(self.id);
        if table.open.is_empty() {
            drop(table);
            self.connections.closed.notify_waiters();
        }
    }
}

/// `response`, holding `guard` until its body's last byte is written (or
/// the body is dropped).
pub(super) fn hold<G: Send + Sync + Unpin + 'static>(
    response: axum::response::Response,
    guard: G,
) -> axum::response::Response {
    response.map(|body| axum::body::Body::new(Held { body, _guard: guard }))
}

/// A body that holds a guard as long as it lives.
struct Held<G> {
    body: axum::body::Body,
    _guard: G,
}

impl<G: Unpin> http_body::Body for Held<G> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request in progress on its connection.
#[derive(Debug)]
pub(super) struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_flood_from_one_address_sheds_its_own_oldest_idle_connections() {
        let connections = Arc::new(Connections::default());
        let flood: Vec<Admitted> = (0..MAX_PER_PEER)
            .map(|_| connections.admit(ip(1)).unwrap())
            .collect();
        // One more from the same address: its oldest idle connection goes.
        let next = connections.admit(ip(1)).unwrap();
        assert!(flood[0].shed.is_cancelled());
        assert!(!flood[1].shed.is_cancelled());
        assert_eq!(connections.open(), MAX_PER_PEER);
        // Another address is not held back by the flood.
        assert!(connections.admit(ip(2)).is_ok());
        drop(next);
    }

    #[test]
    fn busy_connections_are_never_shed_and_a_full_server_refuses() {
        let connections = Arc::new(Connections::default());
        let mut held = Vec::new();
        let mut busy = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            let admitted = connections.admit(ip(u8::try_from(i % 200).unwrap())).unwrap();
            busy.push(admitted.busy());
            held.push(admitted);
        }
        assert_eq!(connections.admit(ip(250)).unwrap_err(), Refused::Full);
        // The first one finishes its request: it is idle, and is shed.
        busy.remove(0);
        let admitted = connections.admit(ip(250)).unwrap();
        assert!(held[0].shed.is_cancelled());
        assert!(held.iter().skip(1).all(|h| !h.shed.is_cancelled()));
        drop(admitted);
    }

    #[test]
    fn a_closed_connection_frees_its_place() {
        let connections = Arc::new(Connections::default());
        let admitted = connections.admit(ip(1)).unwrap();
        assert_eq!(connections.open(), 1);
        drop(admitted);
        assert_eq!(connections.open(), 0);
    }
}
