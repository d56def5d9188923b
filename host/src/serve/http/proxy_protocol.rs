//! The PROXY protocol (HAProxy's, versions 1 and 2) on connections from a
//! load balancer the operator trusts (`serve --proxy-protocol CIDR`).
//!
//! Behind a load balancer every connection comes from the balancer's
//! address, so the limits kept per address (connections, streams) would
//! make every client one peer: one client could take the share of all.
//! A balancer that sends a PROXY header first (HAProxy's `send-proxy-v2`)
//! says whose connection it is, and that client's address is the one the
//! limits count.
//!
//! Only connections from the trusted ranges are read for a header, and
//! each of them must start with one: a header is never optional, or a
//! client of a balancer not configured to send one could write its own.
//! A connection from a trusted range without a header is closed and
//! logged (the balancer is misconfigured). A `LOCAL` header (health
//! checks) or one naming no internet address keeps the balancer's own.
//! The header is read byte-exact, never past its end, within
//! [`HEADER_TIMEOUT`] and at most [`MAX_HEADER`] bytes; at most 256
//! connections wait for theirs at once (`listen.rs`).
//!
//! Trust only the balancers' own addresses: anything that can connect
//! from a trusted range can claim to be any client.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// How long a trusted balancer may take to send the header.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest header read: a version-2 header's 16 bytes and room for
/// the TLVs balancers add (unique id, TLS details), far below the 64 KiB
/// the format allows.
const MAX_HEADER: usize = 16 + 1024;

/// The signature a version-2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The longest version-1 header, its line end included.
const MAX_V1: usize = 107;

/// Why a trusted connection's header could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum NoHeader {
    /// The connection did not start with a PROXY header.
    #[error("the connection did not start with a PROXY protocol header")]
    Missing,
    /// The header was not valid, or too long.
    #[error("its PROXY protocol header is not valid: {0}")]
    Invalid(String),
    /// The header did not arrive in time, or the connection closed.
    #[error("its PROXY protocol header did not arrive within {HEADER_TIMEOUT:?}")]
    Late,
}

/// The client `stream`, from trusted balancer `balancer`, is connecting
/// for: the source its PROXY header names, or the balancer's own address
/// for a `LOCAL` header or one that names none. Reads the header and no
/// byte more.
pub(super) async fn client_of<S: AsyncRead + Unpin>(
    stream: &mut S,
    balancer: SocketAddr,
) -> Result<IpAddr, NoHeader> {
    match tokio::time::timeout(HEADER_TIMEOUT, read_header(stream)).await {
        Ok(Ok(header)) => source(&header, balancer.ip()).map(|client| client.to_canonical()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(NoHeader::Late),
    }
}

/// The header's bytes, read exactly.
async fn read_header<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Vec<u8>, NoHeader> {
    let late = |_| NoHeader::Late;
    // Twelve bytes: a version-2 signature, or the start of the shortest
    // version-1 header ("PROXY UNKNOWN\r\n" has fifteen).
    let mut header = vec![0; 12];
    stream.read_exact(&mut header).await.map_err(late)?;
    if header.as_slice() == V2_SIGNATURE {
        let mut fixed = [0; 4];
        stream.read_exact(&mut fixed).await.map_err(late)?;
        header.extend_from_slice(&fixed);
        let length = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
        if header.len() + length > MAX_HEADER {
            return Err(NoHeader::Invalid(format!(
                "{length} bytes of addresses and TLVs, more than {} are read",
                MAX_HEADER - 16
            )));
        }
        let start = header.len();
        header.resize(start + length, 0);
        stream
            .read_exact(&mut header[start..])
            .await
            .map_err(late)?;
        return Ok(header);
    }
    if !header.starts_with(b"PROXY ") {
        return Err(NoHeader::Missing);
    }
    // Version 1: a line, read a byte at a time so nothing past it is taken.
    while !header.ends_with(b"\r\n") {
        if header.len() >= MAX_V1 {
            return Err(NoHeader::Invalid(format!(
                "a version-1 header is at most {MAX_V1} bytes"
            )));
        }
        header.push(stream.read_u8().await.map_err(late)?);
    }
    Ok(header)
}

/// The source address `header` names, or `balancer` when it names none.
fn source(header: &[u8], balancer: IpAddr) -> Result<IpAddr, NoHeader> {
    use ppp::v1::Addresses as V1;
    use ppp::v2::{Addresses as V2, Command};
    match ppp::HeaderResult::parse(header) {
        ppp::HeaderResult::V2(Ok(header)) => Ok(match (header.command, header.addresses) {
            (Command::Local, _) => balancer,
            (_, V2::IPv4(addresses)) => addresses.source_address.into(),
            (_, V2::IPv6(addresses)) => addresses.source_address.into(),
            (_, V2::Unspecified | V2::Unix(_)) => balancer,
        }),
        ppp::HeaderResult::V1(Ok(header)) => Ok(match header.addresses {
            V1::Tcp4(addresses) => addresses.source_address.into(),
            V1::Tcp6(addresses) => addresses.source_address.into(),
            V1::Unknown => balancer,
        }),
        ppp::HeaderResult::V2(Err(e)) => Err(NoHeader::Invalid(e.to_string())),
        ppp::HeaderResult::V1(Err(e)) => Err(NoHeader::Invalid(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BALANCER: &str = "127.0.0.3:40000";

    /// The client `bytes` name, and what is left unread after the header.
    async fn read(bytes: &[u8]) -> (Result<IpAddr, NoHeader>, Vec<u8>) {
        let mut stream = bytes;
        let client = client_of(&mut stream, BALANCER.parse().unwrap()).await;
        (client, stream.to_vec())
    }

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut header = V2_SIGNATURE.to_vec();
        header.push(0x20 | command);
        header.push(family);
        header.extend_from_slice(&u16::try_from(addresses.len()).unwrap().to_be_bytes());
        header.extend_from_slice(addresses);
        header
    }

    #[tokio::test]
    async fn a_version_1_header_names_the_client_and_nothing_after_it_is_read() {
        let (client, rest) =
            read(b"PROXY TCP4 10.1.2.3 127.0.0.1 5555 8080\r\nGET /healthz HTTP/1.1\r\n").await;
        assert_eq!(client, Ok("10.1.2.3".parse().unwrap()));
        assert_eq!(rest, b"GET /healthz HTTP/1.1\r\n");
        let (client, _) = read(b"PROXY TCP6 2001:db8::7 ::1 5555 8080\r\n").await;
        assert_eq!(client, Ok("2001:db8::7".parse().unwrap()));
        let (client, rest) = read(b"PROXY UNKNOWN\r\nGET").await;
        assert_eq!(client, Ok("127.0.0.3".parse().unwrap()));
        assert_eq!(rest, b"GET");
    }

    #[tokio::test]
    async fn a_version_2_header_names_the_client_and_its_tlvs_are_skipped() {
        // TCP over IPv4: source, destination, ports; then a NOOP TLV.
        let mut addresses = vec![10, 9, 8, 7, 127, 0, 0, 1, 0x15, 0xb3, 0x1f, 0x90];
        addresses.extend_from_slice(&[0x04, 0x00, 0x02, 0xaa, 0xbb]);
        let mut bytes = v2(0x1, 0x11, &addresses);
        bytes.extend_from_slice(b"POST /mcp");
        let (client, rest) = read(&bytes).await;
        assert_eq!(client, Ok("10.9.8.7".parse().unwrap()));
        assert_eq!(rest, b"POST /mcp");
        // A health check (LOCAL): the balancer's own address.
        let (client, rest) = read(&[v2(0x0, 0x00, &[]), b"GET".to_vec()].concat()).await;
        assert_eq!(client, Ok("127.0.0.3".parse().unwrap()));
        assert_eq!(rest, b"GET");
    }

    #[tokio::test]
    async fn a_trusted_connection_without_a_valid_header_is_refused() {
        let (client, _) = read(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(client, Err(NoHeader::Missing));
        let (client, _) = read(b"PROXY TCP4 not an address at all\r\n").await;
        assert!(matches!(client, Err(NoHeader::Invalid(_))), "{client:?}");
        let endless = [b"PROXY TCP4 ".as_slice(), &[b'1'; 200]].concat();
        let (client, _) = read(&endless).await;
        assert!(matches!(client, Err(NoHeader::Invalid(_))), "{client:?}");
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        let (client, _) = read(&huge).await;
        assert!(matches!(client, Err(NoHeader::Invalid(_))), "{client:?}");
        // Cut short.
        let (client, _) = read(b"PROXY TCP4 10.1.2.3").await;
        assert_eq!(client, Err(NoHeader::Late));
    }
}
