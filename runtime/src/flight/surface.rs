//! The gRPC surface: arrow-flight's Flight SQL dispatch, plus GetSchema.
//!
//! arrow-flight implements `FlightService` for every `FlightSqlService` and answers GetSchema
//! with UNIMPLEMENTED there, with no hook to override it. This wrapper delegates every call to
//! that implementation except GetSchema, which ADBC's `execute_schema` needs.

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use tonic::{Request, Response, Status, Streaming};

use super::service::LakeFlightSql;

type Inner = LakeFlightSql;

pub struct LakeFlightService(pub LakeFlightSql);

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
        self.0.schema(request).await.map(Response::new)
    }

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        FlightService::handshake(&self.0, request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        FlightService::list_flights(&self.0, request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        FlightService::get_flight_info(&self.0, request).await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        FlightService::poll_flight_info(&self.0, request).await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        FlightService::do_get(&self.0, request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        FlightService::do_put(&self.0, request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        FlightService::do_exchange(&self.0, request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        FlightService::do_action(&self.0, request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        FlightService::list_actions(&self.0, request).await
    }
}
