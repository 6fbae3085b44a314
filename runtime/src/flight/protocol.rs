//! The Flight SQL protocol: each RPC decoded and handed to the module that answers it. Nothing
//! here plans, writes or builds a result.

use std::pin::Pin;

use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::DoPutPreparedStatementResult;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetCrossReference,
    CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandGetXdbcTypeInfo,
    CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementIngest,
    CommandStatementQuery, CommandStatementUpdate, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{Action, ActionType, FlightDescriptor, FlightInfo, Ticket};
use arrow_flight::{HandshakeRequest, HandshakeResponse};
use futures::{Stream, stream};
use tonic::{Request, Response, Status, Streaming};

use super::actions::CustomAction;
use super::catalog::CATALOG;
use super::commands::{
    command_info, foreign_keys_schema, no_foreign_keys, no_primary_keys, primary_keys_schema,
};
use super::fetch::{flight_data, single};
use super::handle::Handle;
use super::options::SessionOptions;
use super::service::LakeFlightSql;

type Rows = Response<<LakeFlightSql as FlightService>::DoGetStream>;
type HandshakeStream = Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl FlightSqlService for LakeFlightSql {
    type FlightService = LakeFlightSql;

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}

    /// Basic credentials (the password is a token) → `authorization: Bearer <token>`, as JDBC and
    /// ADBC expect. Without configured tokens, authentication is off and Handshake is a no-op.
    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<HandshakeStream>, Status> {
        let token = match &self.tokens {
            Some(tokens) => tokens.authenticate(request.metadata())?,
            None => String::new(),
        };
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let mut response: Response<HandshakeStream> =
            Response::new(Box::pin(stream::iter([Ok(reply)])));
        if !token.is_empty() {
            let header = format!("Bearer {token}")
                .parse()
                .map_err(|_| Status::internal("the token is not a valid header value"))?;
            response.metadata_mut().insert("authorization", header);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        let info = self
            .statement_info(Handle::Sql(query.query), request.into_inner(), options)
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        let rows = self.fetch(&ticket.statement_handle, &options).await?;
        Ok(rows.map(flight_data))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        self.update(command.query, options).await
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        self.ingest(command, request.into_inner(), options).await
    }

    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        self.prepared_update(command, request.into_inner(), options)
            .await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        self.prepare(query, &options).await
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = self.bind_query(query, request.into_inner()).await?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(self.handles.encode(&handle).into()),
        })
    }

    /// The custom actions (`actions.rs`); anything else is UNIMPLEMENTED.
    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.get_ref();
        let Some(custom) = CustomAction::parse(&action.r#type) else {
            return Err(Status::unimplemented(format!(
                "action {:?} is not supported",
                action.r#type
            )));
        };
        let reply = self.perform(custom, &action.body, request.metadata())?;
        let result = arrow_flight::Result {
            body: reply.body.into(),
        };
        let mut response: Response<<Self as FlightService>::DoActionStream> =
            Response::new(Box::pin(stream::iter([Ok(result)])));
        for cookie in reply.cookies {
            let value = cookie
                .parse()
                .map_err(|_| Status::internal("a session cookie is not a valid header value"))?;
            response.metadata_mut().append("set-cookie", value);
        }
        Ok(response)
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        _request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        Err(Status::unimplemented(
            "transactions are not supported: each statement commits on its own (autocommit)",
        ))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(CustomAction::listed().into_iter().map(Ok).collect())
    }

    /// Handles carry their statement and hold nothing on the server: there is nothing to close.
    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        Ok(())
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let handle = self.handles.decode(&query.prepared_statement_handle)?;
        let options = SessionOptions::from_metadata(request.metadata());
        let info = self
            .statement_info(handle, request.into_inner(), options)
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        let options = SessionOptions::from_metadata(request.metadata());
        let rows = self
            .fetch(&query.prepared_statement_handle, &options)
            .await?;
        Ok(rows.map(flight_data))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&self.sql_info.schema(), &query, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        let batch = self.sql_info.batch(query).map_err(FlightError::Arrow);
        Ok(single(batch, self.sql_info.schema()))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        command_info(&schema, &query, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        command_info(&schema, &query, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        self.schemas(query).await
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        command_info(&schema, &query, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        self.tables(query).await
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder(&self.type_info).schema();
        command_info(&schema, &query, request.into_inner())
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        let builder = query.into_builder(&self.type_info);
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&primary_keys_schema(), &query, request.into_inner())
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        Ok(no_primary_keys())
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&foreign_keys_schema(), &query, request.into_inner())
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        Ok(no_foreign_keys())
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&foreign_keys_schema(), &query, request.into_inner())
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        Ok(no_foreign_keys())
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&foreign_keys_schema(), &query, request.into_inner())
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        Ok(no_foreign_keys())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        command_info(&schema, &query, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Rows, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }
}
