//! DoGet's request is read by lake itself (`flight/do_get.rs`, below tonic's codec), so each way
//! of framing it wrongly is tried here through a raw HTTP/2 request: every one gets its gRPC
//! status, and the server stays up.

use super::sql_ok;
use crate::support::LocalLake;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::{FlightDescriptor, Ticket};
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use prost::Message;
use tonic::codegen::http;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::ServiceExt;

/// The query endpoint's limit on a request message (`MAX_DECODING_QUERY`).
const LIMIT: usize = 4 * 1024 * 1024;

/// One gRPC message: the compressed flag, the declared length, the bytes.
fn frame(compressed: u8, declared: u32, message: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(compressed);
    out.put_u32(declared);
    out.put_slice(message);
    out
}

fn whole(message: &[u8]) -> Bytes {
    frame(0, message.len() as u32, message).freeze()
}

/// A DoGet whose request body is `body`, as sent: its status, and how many bytes of messages
/// came before it.
async fn raw_do_get(channel: &Channel, body: Bytes) -> (Status, usize) {
    raw_do_get_within(channel, body, None).await
}

/// The same, with a `grpc-timeout` header: the client keeps no timer of its own, so the status
/// is the server's.
async fn raw_do_get_within(
    channel: &Channel,
    body: Bytes,
    timeout: Option<&str>,
) -> (Status, usize) {
    let mut request = http::Request::builder()
        .method("POST")
        .uri("/arrow.flight.protocol.FlightService/DoGet")
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(timeout) = timeout {
        request = request.header("grpc-timeout", timeout);
    }
    let request = request
        .body(tonic::body::Body::new(Full::new(body)))
        .unwrap();
    let response = channel.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    if let Some(status) = Status::from_header_map(response.headers()) {
        return (status, 0);
    }
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let status = Status::from_header_map(&trailers).expect("a gRPC status in the trailers");
    (status, collected.to_bytes().len())
}

async fn connect(endpoint: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(endpoint.replace("grpc://", "http://"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The ticket GetFlightInfo gives for `sql`, encoded as DoGet's request message.
async fn ticket(channel: &Channel, sql: &str) -> Vec<u8> {
    let command = CommandStatementQuery {
        query: sql.into(),
        transaction_id: None,
    };
    let info = FlightServiceClient::new(channel.clone())
        .get_flight_info(FlightDescriptor::new_cmd(command.as_any().encode_to_vec()))
        .await
        .unwrap()
        .into_inner();
    info.endpoint[0].ticket.clone().unwrap().encode_to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_clients_a_malformed_do_get_gets_a_status() {
    let lake = LocalLake::start();
    let channel = connect(&lake.query).await;
    let ticket = ticket(&channel, "SELECT 1 AS one").await;

    // The same request framed as a client does is answered: the cases below differ from it
    // only in their framing.
    let (status, sent) = raw_do_get(&channel, whole(&ticket)).await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
    assert!(sent > 0, "an answer without messages");

    let oversized = Ticket::new(vec![b'x'; LIMIT + 1]).encode_to_vec();
    let mut twice = frame(0, ticket.len() as u32, &ticket);
    twice.extend_from_slice(&whole(&ticket));
    let cases: [(&str, Bytes, Code); 8] = [
        ("an empty body", Bytes::new(), Code::Internal),
        (
            "a cut header",
            Bytes::from_static(&[0, 0, 0]),
            Code::Internal,
        ),
        (
            "a compressed message",
            frame(1, ticket.len() as u32, &ticket).freeze(),
            Code::Unimplemented,
        ),
        (
            "a length past the limit, declared",
            frame(0, u32::MAX, &ticket).freeze(),
            Code::OutOfRange,
        ),
        (
            "a message past the limit, sent",
            whole(&oversized),
            Code::OutOfRange,
        ),
        (
            "fewer bytes than declared",
            frame(0, ticket.len() as u32 + 10, &ticket).freeze(),
            Code::Internal,
        ),
        ("two messages", twice.freeze(), Code::Internal),
        (
            "a message that is not a Ticket",
            whole(&[0xff, 0xff]),
            Code::Internal,
        ),
    ];
    for (case, body, code) in cases {
        let (status, sent) = raw_do_get(&channel, body).await;
        assert_eq!(status.code(), code, "{case}: {status:?}");
        assert_eq!(sent, 0, "{case}: messages were sent");
    }

    // A well-framed ticket that lake never issued.
    let (status, _) = raw_do_get(&channel, whole(&Ticket::new("forged").encode_to_vec())).await;
    assert_ne!(status.code(), Code::Ok, "{status:?}");

    // The server is up, on this connection and on a new one.
    let (status, sent) = raw_do_get(&channel, whole(&ticket)).await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
    assert!(sent > 0);
    assert_eq!(sql_ok(&lake.query, "SELECT 1 AS one"), "one\n1\n");
}

/// A call whose client's deadline passes ends with DEADLINE_EXCEEDED, as gRPC says (tonic's
/// server ends it with CANCELLED, "Timeout expired", which a Go client once received before its
/// own timer fired).
#[tokio::test(flavor = "multi_thread")]
async fn hostile_clients_a_deadline_is_deadline_exceeded() {
    let lake = LocalLake::start();
    let channel = connect(&lake.query).await;
    let slow = ticket(
        &channel,
        "SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 1000) b",
    )
    .await;
    let started = std::time::Instant::now();
    let (status, sent) = raw_do_get_within(&channel, whole(&slow), Some("300m")).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("deadline"), "{status:?}");
    // The answer's schema went out before the deadline, and no rows.
    assert!(sent < 1024, "{sent} bytes sent");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the deadline took {:?} to end the call",
        started.elapsed()
    );
    // A call within its deadline is answered.
    let (status, sent) = raw_do_get_within(
        &channel,
        whole(&ticket(&channel, "SELECT 1").await),
        Some("20S"),
    )
    .await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
    assert!(sent > 0);
}
