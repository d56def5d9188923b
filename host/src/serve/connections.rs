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
//!   when every connection is busy with a request is a new one refused
//!   (with a 503 written before the connection closes).
//! - **Slow bodies.** A connection whose request is still sending its
//!   body (or waits for room to buffer it) is sheddable too (see
//!   [`Reading`]), but only once no idle connection is left to shed, and
//!   then from the address that holds the most such connections, newest
//!   first: a flood of complete headers followed by bodies dribbled a byte
//!   at a time replaces itself, rather than holding every place busy for
//!   the 30 s a body may take, while an honest slow upload from an address
//!   that is not flooding is kept. (What those bodies may buffer is
//!   bounded in all, and per address, by the HTTP front end.)
//! - **Addresses.** Every per-address limit here and in the HTTP front end
//!   counts an IPv6 address's /64 as one address ([`limit_key`]): a host
//!   is commonly given a whole /64, so counting its addresses one by one
//!   would bound nothing.
//! - **Streams.** A request whose answer is a stream that lasts (an MCP
//!   event stream, a `subscriptions/listen`) keeps its connection busy for
//!   as long as it lasts, so streams may hold at most half of the
//!   connections, globally ([`MAX_STREAMS`]) and per address
//!   ([`MAX_STREAMS_PER_PEER`]): the other half always serves requests.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
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

/// Long-lived streams open at once, from every address together.
pub(super) const MAX_STREAMS: usize = MAX_CONNECTIONS / 2;

/// Long-lived streams one address may hold.
pub(super) const MAX_STREAMS_PER_PEER: usize = MAX_PER_PEER / 2;

/// The most bytes of request head (request line and headers) a connection
/// buffers: room for a long bearer token and every MCP header, and small
/// enough that all connections together hold a few MiB.
pub(super) const MAX_HEADER_BYTES: usize = 16 << 10;

/// The address a per-address limit counts `ip` under: an IPv4 address
/// (also when written as an IPv4-mapped IPv6 address), or the /64 network
/// of an IPv6 address.
pub(in crate::serve) fn limit_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
    }
}

/// The open connections, oldest first.
#[derive(Debug, Default)]
pub(super) struct Connections {
    table: Mutex<Table>,
    /// Woken when the last connection closes.
    closed: tokio::sync::Notify,
}

/// The long-lived streams open, by address.
#[derive(Debug, Default)]
pub(super) struct Streams {
    table: Mutex<StreamTable>,
}

#[derive(Debug, Default)]
struct StreamTable {
    open: usize,
    per_peer: HashMap<IpAddr, usize>,
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
    /// to its response's last byte. Read and written under the table's
    /// lock, so a connection is never shed as a request starts on it.
    busy: usize,
    /// Requests on the connection reading their body (not counted in
    /// `busy` meanwhile, see [`Reading`]).
    reading: usize,
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

    /// Shed a connection that `matches` to make room for another; whether
    /// one was. The oldest idle one goes first (headers unfinished, or
    /// between requests); failing that, a connection reading its request's
    /// body, from the address holding the most of those, newest first.
    /// Connections busy with a request otherwise are never shed.
    fn shed_one(&mut self, matches: impl Fn(&Entry) -> bool) -> bool {
        let sheddable = |entry: &Entry| matches(entry) && entry.busy == 0;
        let idle = self
            .open
            .iter()
            .find(|(_, entry)| sheddable(entry) && entry.reading == 0)
            .map(|(&id, _)| id);
        let victim = idle.or_else(|| {
            let mut reading: HashMap<IpAddr, usize> = HashMap::new();
            for entry in self.open.values().filter(|entry| sheddable(entry)) {
                *reading.entry(entry.peer).or_default() += 1;
            }
            let most = reading.values().copied().max()?;
            // The newest of those: when a flood comes one connection per
            // address, every address ties, and the oldest reading
            // connection is likelier an honest upload than a new one.
            self.open
                .iter()
                .rev()
                .find(|(_, entry)| {
                    sheddable(entry) && reading.get(&entry.peer).copied() == Some(most)
                })
                .map(|(&id, _)| id)
        });
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
    pub(super) fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, Refused> {
        let peer = limit_key(address);
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.per_peer.get(&peer).copied().unwrap_or(0) >= MAX_PER_PEER
            && !table.shed_one(|entry| entry.peer == peer)
        {
            return Err(Refused::Peer);
        }
        if table.open.len() >= MAX_CONNECTIONS && !table.shed_one(|_| true) {
            return Err(Refused::Full);
        }
        let id = table.next;
        table.next += 1;
        let shed = CancellationToken::new();
        table.open.insert(
            id,
            Entry {
                peer,
                busy: 0,
                reading: 0,
                shed: shed.clone(),
            },
        );
        *table.per_peer.entry(peer).or_default() += 1;
        Ok(Admitted {
            id,
            peer: address,
            connections: self.clone(),
            shed,
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many connections are open.
    fn open(&self) -> usize {
        self.table().open.len()
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

impl Streams {
    /// Hold a long-lived stream for `peer`, if streams have room.
    pub(super) fn hold(self: &Arc<Self>, address: IpAddr) -> Option<Stream> {
        let peer = limit_key(address);
        let mut streams = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = streams.per_peer.get(&peer).copied().unwrap_or(0);
        if streams.open >= MAX_STREAMS || held >= MAX_STREAMS_PER_PEER {
            return None;
        }
        streams.open += 1;
        *streams.per_peer.entry(peer).or_default() += 1;
        Some(Stream {
            peer,
            streams: self.clone(),
        })
    }
}

/// One connection's place in the table; freed when dropped.
#[derive(Debug)]
pub(super) struct Admitted {
    id: u64,
    peer: IpAddr,
    connections: Arc<Connections>,
    shed: CancellationToken,
}

impl Admitted {
    /// The peer's address, as it connected (its limits count it as
    /// [`limit_key`] of it).
    pub(super) fn peer(&self) -> IpAddr {
        self.peer
    }

    /// Resolves when the connection was shed to make room for another.
    pub(super) fn shed(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.shed.cancelled()
    }

    /// Mark a request in progress until the returned guard is dropped
    /// (with its response's last byte): a busy connection is never shed.
    /// `None` if the connection was shed already: the request must not run.
    pub(super) fn busy(&self) -> Option<Busy> {
        let mut table = self.connections.table();
        table.open.get_mut(&self.id)?.busy += 1;
        Some(Busy {
            id: self.id,
            connections: self.connections.clone(),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut table = self.connections.table();
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
    response.map(|body| {
        axum::body::Body::new(Held {
            body,
            _guard: guard,
        })
    })
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
pub(super) struct Busy {
    id: u64,
    connections: Arc<Connections>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(entry) = self.connections.table().open.get_mut(&self.id) {
            entry.busy -= 1;
        }
    }
}

impl Busy {
    /// The handle with which the request marks its connection as reading
    /// its body, see [`Reading`].
    pub(super) fn reading(&self) -> Reading {
        Reading {
            id: self.id,
            connections: self.connections.clone(),
        }
    }
}

/// A request's handle on its connection, carried in its extensions: while
/// the request reads its body the connection is not busy, and may be shed
/// to make room for another, oldest first (the request is then dropped,
/// unread and unanswered, with its connection).
#[derive(Debug, Clone)]
pub(in crate::serve) struct Reading {
    id: u64,
    connections: Arc<Connections>,
}

impl Reading {
    /// Mark the connection sheddable until the returned guard is dropped,
    /// when the body is read (or its reading gave up).
    pub(in crate::serve) fn start(&self) -> ReadingBody {
        let mut table = self.connections.table();
        let counted = match table.open.get_mut(&self.id) {
            Some(entry) if entry.busy > 0 => {
                entry.busy -= 1;
                entry.reading += 1;
                true
            }
            _ => false,
        };
        ReadingBody {
            reading: self.clone(),
            counted,
        }
    }
}

/// A connection reading its request's body: busy again when dropped.
#[derive(Debug)]
pub(in crate::serve) struct ReadingBody {
    reading: Reading,
    /// Whether the connection's busy count was lowered (it had not been
    /// shed yet), to be raised again.
    counted: bool,
}

impl Drop for ReadingBody {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        if let Some(entry) = self
            .reading
            .connections
            .table()
            .open
            .get_mut(&self.reading.id)
        {
            entry.reading -= 1;
            entry.busy += 1;
        }
    }
}

/// A long-lived stream held open; freed when dropped.
#[derive(Debug)]
pub(super) struct Stream {
    peer: IpAddr,
    streams: Arc<Streams>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut streams = self
            .streams
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        streams.open -= 1;
        if let Some(held) = streams.per_peer.get_mut(&self.peer) {
            *held -= 1;
            if *held == 0 {
                streams.per_peer.remove(&self.peer);
            }
        }
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
            let admitted = connections
                .admit(ip(u8::try_from(i % 200).unwrap()))
                .unwrap();
            busy.push(admitted.busy().unwrap());
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
    fn a_shed_connection_takes_no_new_request() {
        let connections = Arc::new(Connections::default());
        let first = connections.admit(ip(1)).unwrap();
        let _rest: Vec<Admitted> = (1..MAX_PER_PEER)
            .map(|_| connections.admit(ip(1)).unwrap())
            .collect();
        let _newest = connections.admit(ip(1)).unwrap();
        assert!(first.shed.is_cancelled());
        assert!(first.busy().is_none(), "shed: its next request is refused");
    }

    #[test]
    fn streams_hold_at_most_half_of_the_connections() {
        let streams = Arc::new(Streams::default());
        let mine: Vec<Stream> = (0..MAX_STREAMS_PER_PEER)
            .map(|_| streams.hold(ip(1)).unwrap())
            .collect();
        assert!(streams.hold(ip(1)).is_none(), "one address's share");
        let others: Vec<Stream> = (0..MAX_STREAMS - MAX_STREAMS_PER_PEER)
            .map(|i| {
                streams
                    .hold(ip(2 + u8::try_from(i / 100).unwrap()))
                    .unwrap()
            })
            .collect();
        assert!(streams.hold(ip(99)).is_none(), "everyone's share");
        drop(mine);
        assert!(streams.hold(ip(1)).is_some());
        drop(others);
    }

    /// A connection from `peer` whose request is reading its body.
    fn reading_from(connections: &Arc<Connections>, peer: IpAddr) -> (Admitted, Busy, ReadingBody) {
        let admitted = connections.admit(peer).unwrap();
        let busy = admitted.busy().unwrap();
        let reading = busy.reading().start();
        (admitted, busy, reading)
    }

    /// Regression: shedding mid-body connections oldest first killed an
    /// honest slow upload. Idle connections go first; then reading ones
    /// from the address holding the most, so a flood of dribbled bodies
    /// sheds itself and the upload is kept.
    #[test]
    fn an_honest_slow_upload_is_kept_while_a_flood_of_slow_bodies_is_shed() {
        let connections = Arc::new(Connections::default());
        // The honest upload is the oldest connection of all.
        let upload = reading_from(&connections, ip(1));
        let mut flood: Vec<_> = (1..MAX_CONNECTIONS)
            .map(|i| reading_from(&connections, ip(2 + u8::try_from(i % 5).unwrap())))
            .collect();
        // Full, and nothing idle: a reading connection from a flooding
        // address makes room, never the upload.
        let idle = connections.admit(ip(200)).unwrap();
        assert!(!upload.0.shed.is_cancelled());
        assert_eq!(flood.iter().filter(|c| c.0.shed.is_cancelled()).count(), 1);
        // An idle connection, though newer than every reading one, goes
        // first.
        flood.push(reading_from(&connections, ip(201)));
        assert!(idle.shed.is_cancelled());
        assert_eq!(flood.iter().filter(|c| c.0.shed.is_cancelled()).count(), 1);
        // The flood goes on from new addresses: it keeps shedding itself.
        for i in 0..2000 {
            flood.push(reading_from(
                &connections,
                ip(210 + u8::try_from(i % 3).unwrap()),
            ));
        }
        assert!(
            !upload.0.shed.is_cancelled(),
            "the upload outlives the flood"
        );
        assert_eq!(connections.open(), MAX_CONNECTIONS);
    }

    /// A flood of slow bodies from many addresses, one connection each,
    /// ties every address: the newest connection goes, not the honest
    /// upload that came first.
    #[test]
    fn a_flood_of_one_slow_body_per_address_sheds_its_newest_not_the_upload() {
        let connections = Arc::new(Connections::default());
        let upload = reading_from(&connections, ip(1));
        let mut flood = Vec::new();
        for i in 1..MAX_CONNECTIONS + 500 {
            let [a, b] = u16::try_from(i).unwrap().to_be_bytes();
            flood.push(reading_from(&connections, IpAddr::from([10, 1, a, b])));
        }
        assert!(!upload.0.shed.is_cancelled(), "the upload is kept");
        assert_eq!(connections.open(), MAX_CONNECTIONS);
    }

    #[test]
    fn an_ipv6_network_is_one_address() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(limit_key(a), limit_key(b));
        assert_ne!(limit_key(a), limit_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(limit_key(mapped), ip(1));
        let connections = Arc::new(Connections::default());
        let _held: Vec<(Admitted, Busy)> = (0..MAX_PER_PEER)
            .map(|i| {
                let ip = IpAddr::V6(std::net::Ipv6Addr::from(
                    u128::from("2001:db8:1:2::".parse::<std::net::Ipv6Addr>().unwrap()) + i as u128,
                ));
                let admitted = connections.admit(ip).unwrap();
                let busy = admitted.busy().unwrap();
                (admitted, busy)
            })
            .collect();
        assert_eq!(
            connections.admit(b).unwrap_err(),
            Refused::Peer,
            "one /64 shares one cap"
        );
        assert!(connections.admit(c).is_ok());
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
