//! The gRPC surface: arrow-flight's Flight SQL dispatch, plus GetSchema.
//!
//! arrow-flight implements `FlightService` for every `FlightSqlService` and answers GetSchema
//! with UNIMPLEMENTED there, with no hook to override it. This wrapper delegates every call to
//! that implementation except GetSchema, which ADBC's `execute_schema` needs.
//!
//! It is also where every call is guarded: a panic in a handler (or while streaming its result)
//! becomes INTERNAL for that call alone, and no error a client sees names the server's paths.

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use futures::{FutureExt, Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::ipc::Messages;
use super::redact::Redactor;
use super::service::LakeFlightSql;

type Inner = LakeFlightSql;

pub(super) struct LakeFlightService(pub LakeFlightSql);

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn internal(call: &str, panic: &(dyn std::any::Any + Send)) -> Status {
    tracing::error!(call, panic = %panic_text(panic), "a request panicked; the server goes on");
    Status::internal(format!(
        "{call} failed inside the server (a bug, logged there); other calls are unaffected"
    ))
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// `stream`'s errors redacted, and a panic while polling it ends it with INTERNAL.
fn guard_stream<T: Send + 'static>(
    call: &'static str,
    stream: BoxStream<T>,
    redactor: Redactor,
) -> BoxStream<T> {
    AssertUnwindSafe(stream)
        .catch_unwind()
        .scan(false, move |failed, item| {
            let item = match item {
                _ if *failed => None,
                Ok(Ok(v)) => Some(Ok(v)),
                Ok(Err(status)) => Some(Err(redactor.status(status))),
                Err(panic) => {
                    *failed = true;
                    Some(Err(internal(call, &*panic)))
                }
            };
            futures::future::ready(item)
        })
        .boxed()
}

impl LakeFlightService {
    /// DoGet's messages, guarded like every call.
    pub(super) async fn do_get_messages(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Messages>, Status> {
        let response = self.guard("DoGet", self.0.messages(request)).await?;
        let redactor = self.0.redactor().clone();
        Ok(response.map(|stream| guard_stream("DoGet", stream, redactor)))
    }

    async fn guard<T>(
        &self,
        call: &'static str,
        f: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        match AssertUnwindSafe(f).catch_unwind().await {
            Ok(result) => result.map_err(|s| self.0.redactor().status(s)),
            Err(panic) => Err(internal(call, &*panic)),
        }
    }
}

#[tonic::async_trait]
impl FlightService for LakeFlightService {
    type HandshakeStream = <Inner as FlightService>::HandshakeStream;
    type ListFlightsStream = <Inner as FlightService>::ListFlightsStream;
    type DoGetStream = <Inner as FlightService>::DoGetStream;
    type DoPutStream = <Inner as FlightService>::DoPutStream;
    type DoExchangeStream = <Inner as FlightService>::DoExchangeStream;
    type DoActionStream = <Inner as FlightService>::DoActionStream;
    type ListActionsStream = <Inner as FlightService>::ListActionsStream;

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.guard("GetSchema", self.0.schema(request))
            .await
            .map(Response::new)
    }

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.guard("Handshake", FlightService::handshake(&self.0, request))
            .await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.guard("ListFlights", FlightService::list_flights(&self.0, request))
            .await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.guard(
            "GetFlightInfo",
            FlightService::get_flight_info(&self.0, request),
        )
        .await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        self.guard(
            "PollFlightInfo",
            FlightService::poll_flight_info(&self.0, request),
        )
        .await
    }

    /// Reached only by in-process callers: the server answers DoGet in `do_get` (its
    /// messages framed without a copy).
    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let response = self.do_get_messages(request).await?;
        Ok(response.map(super::fetch::flight_data))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.guard("DoPut", FlightService::do_put(&self.0, request))
            .await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.guard("DoExchange", FlightService::do_exchange(&self.0, request))
            .await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        self.guard("DoAction", FlightService::do_action(&self.0, request))
            .await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.guard("ListActions", FlightService::list_actions(&self.0, request))
            .await
    }
}
