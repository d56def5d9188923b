//! The body budget, shares and reads, on bodies made here.

use super::*;

use http_body::Frame;
use tokio::sync::mpsc;

const ADDRESS: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

fn chunked(pieces: Vec<&'static [u8]>) -> Body {
    let pieces = pieces
        .into_iter()
        .map(|piece| Ok::<_, std::io::Error>(Bytes::from_static(piece)));
    Body::from_stream(futures::stream::iter(pieces))
}

async fn read(
    bodies: &Bodies,
    address: Option<IpAddr>,
    body: Body,
) -> Result<(Bytes, BodyRoom), Unread> {
    let room = bodies.room_for(address, body.size_hint().exact()).await?;
    bodies.collect(body, room).await
}

/// Regression: the room a body holds in the budget is what it sent,
/// held until the request is handled, and given back then.
#[tokio::test]
async fn a_body_holds_room_for_what_it_sent_until_dropped() {
    let bodies = Bodies::new(1 << 20);
    let full = bodies.room();
    let (body, room) = read(&bodies, Some(ADDRESS), Body::from(vec![b'x'; 1000]))
        .await
        .ok()
        .expect("a small body is read");
    assert_eq!(body.len(), 1000);
    assert_eq!(bodies.room(), full - 1000);
    assert_eq!(lock(&bodies.held).get(&ADDRESS), Some(&1000));
    drop(room);
    assert_eq!(bodies.room(), full);
    assert!(
        lock(&bodies.held).is_empty(),
        "the address's share is given back"
    );
}

/// Regression: a body's declared length took room in the budget all
/// addresses share as its headers arrived, so 16 requests that sent
/// only headers held all of it. A declared length now takes room in its
/// own address's share only; the budget is taken as bytes arrive.
#[tokio::test]
async fn a_declared_length_holds_its_own_share_not_the_budget() {
    let bodies = Bodies::new(4 << 20);
    let full = bodies.room();
    let body = Body::from(vec![b'x'; 4 << 20]);
    let room = bodies
        .room_for(Some(ADDRESS), body.size_hint().exact())
        .await
        .ok()
        .unwrap();
    assert_eq!(
        bodies.room(),
        full,
        "nothing sent, nothing of the budget held"
    );
    assert_eq!(lock(&bodies.held).get(&ADDRESS), Some(&(4 << 20)));
    drop(room);
    assert!(lock(&bodies.held).is_empty());
}

/// A body that declares no length takes room as it arrives, for the
/// memory it holds (its buffer's capacity), and its pieces come out
/// whole.
#[tokio::test]
async fn a_chunked_body_takes_room_for_the_memory_it_holds() {
    let bodies = Bodies::new(1 << 20);
    let full = bodies.room();
    let body = chunked(vec![b"{\"a\":", b"1", b"}"]);
    let room = bodies
        .room_for(Some(ADDRESS), body.size_hint().exact())
        .await
        .ok()
        .unwrap();
    assert_eq!(bodies.room(), full);
    let (body, room) = bodies.collect(body, room).await.ok().unwrap();
    assert_eq!(&body[..], b"{\"a\":1}");
    let held = full - bodies.room();
    assert!(held >= body.len() && held <= 2 * body.len(), "{held}");
    assert_eq!(lock(&bodies.held).get(&ADDRESS), Some(&held));
    drop(room);
    assert_eq!(bodies.room(), full);
    assert!(lock(&bodies.held).is_empty());
}

/// A body that sends more than `--max-body` without declaring it is
/// refused once it passes the bound.
#[tokio::test]
async fn a_chunked_body_past_the_bound_is_refused() {
    let bodies = Bodies::new(4);
    assert!(matches!(
        read(&bodies, Some(ADDRESS), chunked(vec![b"abc", b"de"])).await,
        Err(Unread::TooLarge)
    ));
    assert_eq!(
        bodies.room(),
        bodies.total,
        "nothing is held after a refusal"
    );
    assert!(lock(&bodies.held).is_empty());
}

/// Regression: one address holds at most its share of the budget (a
/// quarter), so its slow calls cannot hold the room every other
/// client needs; another address still has room.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_the_budget() {
    let max_body = 4 << 20;
    let bodies = Bodies::new(max_body);
    assert_eq!(bodies.share, BODY_BUDGET / 4);
    let mut held = Vec::new();
    for _ in 0..bodies.share / max_body {
        let (_, room) = read(&bodies, Some(ADDRESS), Body::from(vec![b'x'; max_body]))
            .await
            .ok()
            .expect("within the share");
        held.push(room);
    }
    assert!(matches!(
        read(&bodies, Some(ADDRESS), Body::from(vec![b'x'; 10])).await,
        Err(Unread::OverShare)
    ));
    let other = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));
    assert!(
        read(&bodies, Some(other), Body::from(vec![b'x'; 10]))
            .await
            .is_ok()
    );
    held.pop();
    assert!(
        read(&bodies, Some(ADDRESS), Body::from(vec![b'x'; 10]))
            .await
            .is_ok(),
        "room given back is room again"
    );
}

/// The share is never less than one body of `--max-body`.
#[test]
fn the_share_holds_at_least_one_body() {
    let bodies = Bodies::new(40 << 20);
    assert_eq!(bodies.share, 40 << 20);
    let bodies = Bodies::new(100 << 20);
    assert_eq!((bodies.total, bodies.share), (100 << 20, 100 << 20));
}

/// Regression: a body past the budget waits for room (5 s), and is
/// refused when none comes, rather than growing the server past its
/// bound; what it was given of its address's share comes back.
#[tokio::test]
async fn a_body_past_the_budget_is_refused_when_no_room_comes() {
    let bodies = Bodies::new(1 << 20);
    let _taken = bodies
        .budget
        .clone()
        .acquire_many_owned(u32::try_from(bodies.room()).unwrap())
        .await;
    assert!(matches!(
        read(&bodies, Some(ADDRESS), Body::from(vec![b'x'; 10])).await,
        Err(Unread::NoRoom)
    ));
    assert!(lock(&bodies.held).is_empty());
}

/// A body whose pieces the test sends one at a time, declaring `len`.
struct Fed {
    pieces: mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>,
    len: u64,
}

impl http_body::Body for Fed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.pieces
            .poll_recv(cx)
            .map(|piece| piece.map(|piece| piece.map(Frame::data)))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

type Feed = mpsc::UnboundedSender<Result<Bytes, std::io::Error>>;

/// A body declaring `len` bytes, and where its pieces are sent.
fn fed(len: u64) -> (Feed, Body) {
    let (feed, pieces) = mpsc::unbounded_channel();
    (feed, Body::new(Fed { pieces, len }))
}

/// Let every task that can run, run (a current-thread runtime).
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn ten() -> Result<Bytes, std::io::Error> {
    Ok(Bytes::from_static(&[b'x'; 10]))
}

/// Bodies growing together within the budget can each hold part of their
/// room and wait for more (three 50-byte bodies in a 100-byte budget, 10
/// bytes at a time, end up holding all of it). That is bounded: a wait
/// ends, its body is refused and gives its room back, and the others are
/// read whole; nothing is held after. (Room is taken for bytes sent, not
/// announced: see `collect`.)
#[tokio::test]
async fn bodies_growing_together_are_refused_one_by_one_not_all_held() {
    let bodies = Arc::new(Bodies::sized(100, 100, 50, Duration::from_millis(50)));
    let mut feeds = Vec::new();
    let mut reads = Vec::new();
    for last in 1..=3 {
        let (feed, body) = fed(50);
        feeds.push(feed);
        let bodies = bodies.clone();
        let address = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, last));
        reads.push(tokio::spawn(async move {
            read(&bodies, Some(address), body)
                .await
                .map(|(body, room)| (body.len(), room))
        }));
    }
    // Ten bytes from each in turn, five times.
    for _ in 0..5 {
        for feed in &feeds {
            let _ = feed.send(ten());
            settle().await;
        }
    }
    // Each has sent its length: its body ends once read.
    drop(feeds);
    let (mut whole, mut refused, mut rooms) = (0, 0, Vec::new());
    for read in reads {
        match read.await.unwrap() {
            Ok((50, room)) => {
                whole += 1;
                rooms.push(room);
            }
            Err(Unread::NoRoom) => refused += 1,
            Ok((len, _)) => panic!("a body of {len} bytes"),
            Err(_) => panic!("a refusal other than no room"),
        }
    }
    assert!(whole >= 1, "the refused give room to the others");
    assert_eq!(whole + refused, 3);
    drop(rooms);
    assert_eq!(bodies.room(), 100);
    assert!(lock(&bodies.held).is_empty());
}

/// Regression: a declared body whose second piece took the rest of its
/// declared length held room in the budget for bytes it never sent: four
/// addresses' 4 MiB bodies of two bytes each held all 64 MiB. Room is
/// taken for the memory bytes sent hold.
#[tokio::test]
async fn a_declared_body_holds_room_for_what_it_sent_not_what_it_declared() {
    let bodies = Arc::new(Bodies::sized(1000, 1000, 1000, Duration::from_secs(30)));
    let (feed, body) = fed(1000);
    let room = bodies
        .room_for(Some(ADDRESS), Some(1000))
        .await
        .ok()
        .unwrap();
    let reading = {
        let bodies = bodies.clone();
        tokio::spawn(async move { bodies.collect(body, room).await.is_ok() })
    };
    let _ = feed.send(Ok(Bytes::from_static(b"[")));
    settle().await;
    let _ = feed.send(Ok(Bytes::from_static(b"{")));
    settle().await;
    let held = 1000 - bodies.room();
    assert!(held <= 2, "two bytes sent hold {held} bytes of the budget");
    drop(feed);
    assert!(reading.await.unwrap());
    assert_eq!(bodies.room(), 1000);
}

/// A body refused for want of room after it took part of it (its first
/// piece) gives that part back, in the budget and its address's share.
#[tokio::test]
async fn a_body_refused_after_taking_part_of_its_room_gives_it_back() {
    let bodies = Bodies::sized(100, 100, 50, Duration::from_millis(50));
    let (feed, body) = fed(50);
    let _ = feed.send(ten());
    let _ = feed.send(ten());
    let taken = bodies.budget.clone().acquire_many_owned(85);
    let room = bodies.room_for(Some(ADDRESS), Some(50)).await.ok().unwrap();
    let _taken = taken.await.unwrap();
    assert!(matches!(
        bodies.collect(body, room).await,
        Err(Unread::NoRoom)
    ));
    assert_eq!(bodies.room(), 15, "only the other holder's room is held");
    assert!(lock(&bodies.held).is_empty());
}

/// A body that ends in an error (a client that closed its connection
/// before the length it declared) is `Broken`, and holds nothing after.
#[tokio::test]
async fn a_body_cut_short_is_broken_and_holds_nothing() {
    let bodies = Bodies::sized(100, 100, 50, Duration::from_secs(30));
    let (feed, body) = fed(50);
    let _ = feed.send(ten());
    let _ = feed.send(Err(std::io::Error::other(
        "connection closed before the body ended",
    )));
    assert!(matches!(
        read(&bodies, Some(ADDRESS), body).await,
        Err(Unread::Broken)
    ));
    assert_eq!(bodies.room(), 100);
    assert!(lock(&bodies.held).is_empty());
}
