//! DoGet served below tonic's codec: a response's messages are framed around their batches'
//! own buffers (`ipc::Message::into_frame`) and handed to HTTP/2 as they are, where tonic's
//! generated service would encode each into a fresh buffer first. Every other call goes to that
//! service unchanged.
//!
//! Every call passes here, so this is also where a call's deadline is kept (`call_deadline`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_flight::Ticket;
use bytes::{Buf, Bytes};
use futures::StreamExt;
use http_body::Frame;
use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;
use tonic::{Request, Status};

use super::call_deadline::{self, Timer};
use super::ipc::Messages;
use super::surface::LakeFlightService;

const DO_GET: &str = "/arrow.flight.protocol.FlightService/DoGet";

/// The Flight service: DoGet here, everything else by `flight` (tonic's generated server).
#[derive(Clone)]
pub(super) struct Routes<S> {
    flight: S,
    service: Arc<LakeFlightService>,
    /// The largest request message accepted (as tonic's `max_decoding_message_size`).
    limit: usize,
}

impl<S> Routes<S> {
    pub(super) fn new(flight: S, service: Arc<LakeFlightService>, limit: usize) -> Self {
        Self {
            flight,
            service,
            limit,
        }
    }
}

impl<S: NamedService> NamedService for Routes<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Routes<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.flight.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let mut timer = Timer::start(request.headers());
        if request.uri().path() != DO_GET {
            let answer = self.flight.call(request);
            return Box::pin(async move {
                let answered = call_deadline::within(timer.as_mut(), async {
                    answer.await.map_err(|never| match never {})
                })
                .await;
                Ok(answered.unwrap_or_else(Status::into_http))
            });
        }
        let (service, limit) = (self.service.clone(), self.limit);
        Box::pin(async move {
            Ok(do_get(&service, request, limit, timer)
                .await
                .unwrap_or_else(Status::into_http))
        })
    }
}

/// A DoGet: its answer within the client's deadline (`timer`), which then bounds the stream of
/// rows too — gRPC's deadline is the whole call's, and tonic keeps none on a response body.
async fn do_get(
    service: &LakeFlightService,
    request: http::Request<Body>,
    limit: usize,
    mut timer: Option<Timer>,
) -> Result<http::Response<Body>, Status> {
    let response = call_deadline::within(timer.as_mut(), async {
        let (parts, body) = request.into_parts();
        let ticket = read_message(body, limit).await?;
        let ticket: Ticket = prost::Message::decode(ticket)
            .map_err(|e| Status::internal(format!("the DoGet request is not a Ticket: {e}")))?;
        service
            .do_get_messages(Request::from_http(http::Request::from_parts(parts, ticket)))
            .await
    })
    .await?;
    let (metadata, messages, _) = response.into_parts();
    let mut response = http::Response::new(Body::new(Frames::new(messages, timer)));
    *response.headers_mut() = metadata.into_headers();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    Ok(response)
}

/// The one message of a unary gRPC request body, at most `limit` bytes; as tonic, a compressed
/// message is refused (no compression is enabled).
async fn read_message(body: Body, limit: usize) -> Result<Bytes, Status> {
    let mut body = http_body_util::Limited::new(body, limit.saturating_add(5))
        .collect()
        .await
        .map_err(|e| match e.downcast::<Status>() {
            Ok(status) => *status,
            Err(e) => Status::out_of_range(format!(
                "the request is past the {limit}-byte message limit: {e}"
            )),
        })?
        .to_bytes();
    if body.len() < 5 {
        return Err(Status::internal("the DoGet request holds no message"));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::unimplemented(
            "the request message is compressed; this server accepts none",
        ));
    }
    if len > limit {
        return Err(Status::out_of_range(format!(
            "the request message takes {len} bytes; the limit is {limit}"
        )));
    }
    if body.len() != len {
        return Err(Status::internal(format!(
            "the DoGet request holds {} bytes after a {len}-byte message header; one message \
             was expected",
            body.len()
        )));
    }
    Ok(body)
}

/// A response body: each message's frame pieces as HTTP/2 data, then the gRPC status as
/// trailers (OK at the end, the error that ended the stream, or DEADLINE_EXCEEDED once the
/// call's deadline passes between two messages).
struct Frames {
    messages: Messages,
    pending: VecDeque<Bytes>,
    timer: Option<Timer>,
    done: bool,
}

impl Frames {
    fn new(messages: Messages, timer: Option<Timer>) -> Self {
        Self {
            messages,
            pending: VecDeque::new(),
            timer,
            done: false,
        }
    }

    fn trailers(&mut self, status: &Status) -> Frame<Bytes> {
        self.done = true;
        let mut trailers = http::HeaderMap::new();
        if let Err(unencodable) = status.add_header(&mut trailers) {
            trailers.clear();
            let _ = unencodable.add_header(&mut trailers);
        }
        Frame::trailers(trailers)
    }
}

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        loop {
            if let Some(piece) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if self.done {
                return Poll::Ready(None);
            }
            // Between two messages: a message is never cut short.
            if let Some(timer) = self.timer.as_mut()
                && timer.poll_expired(cx).is_ready()
            {
                let status = timer.exceeded();
                return Poll::Ready(Some(Ok(self.trailers(&status))));
            }
            let frame = match std::task::ready!(self.messages.poll_next_unpin(cx)) {
                Some(Ok(message)) => match message.into_frame() {
                    Ok(pieces) => {
                        self.pending.extend(pieces);
                        continue;
                    }
                    Err(status) => self.trailers(&status),
                },
                Some(Err(status)) => self.trailers(&status),
                None => self.trailers(&Status::ok("")),
            };
            return Poll::Ready(Some(Ok(frame)));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_empty()
    }
}
