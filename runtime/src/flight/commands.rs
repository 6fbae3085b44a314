//! The catalog commands (GetCatalogs, GetDbSchemas, GetTables, GetTableTypes, GetPrimaryKeys,
//! GetSqlInfo, GetXdbcTypeInfo): each FlightInfo carries the command back as its ticket, and
//! each DoGet answers in one batch.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables, ProstMessageExt};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use prost::Message;
use tonic::{Response, Status};

use super::catalog::CATALOG;
use super::fetch::{DoGetStream, single};
use super::service::LakeFlightSql;
use super::wire::wire_schema;
use crate::catalog::NamespaceName;
use crate::engine::TableRef;

/// GetPrimaryKeys' result schema (Flight SQL spec). Lance tables have no primary keys.
pub(super) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// A catalog command's FlightInfo: its result schema, and the command itself as the ticket.
pub(super) fn command_info(
    schema: &Schema,
    command: &impl ProstMessageExt,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// GetPrimaryKeys' answer: none.
pub(super) fn no_primary_keys() -> Response<DoGetStream> {
    let schema = primary_keys_schema();
    single(Ok(RecordBatch::new_empty(schema.clone())), schema)
}

impl LakeFlightSql {
    /// GetDbSchemas: the namespaces of the warehouse as it is now.
    pub(super) async fn schemas(
        &self,
        query: CommandGetDbSchemas,
    ) -> Result<Response<DoGetStream>, Status> {
        let catalog = self.catalog().await?;
        let mut builder = query.into_builder();
        for (ns, _) in catalog.tables() {
            builder.append(CATALOG, ns);
        }
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    /// GetTables: every table, with its columns' types if asked (`include_schema`).
    pub(super) async fn tables(
        &self,
        query: CommandGetTables,
    ) -> Result<Response<DoGetStream>, Status> {
        let include_schema = query.include_schema;
        let catalog = self.catalog().await?;
        let mut builder = query.into_builder();
        for (ns, tables) in catalog.tables() {
            for table in tables {
                let table_schema = if include_schema {
                    let namespace =
                        NamespaceName::parse(ns).map_err(|e| Status::internal(e.to_string()))?;
                    self.columns(&TableRef::new(namespace, table.clone())).await
                } else {
                    Arc::new(Schema::empty())
                };
                builder
                    .append(CATALOG, ns, table.as_str(), "TABLE", &table_schema)
                    .map_err(|e| Status::internal(e.to_string()))?;
            }
        }
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    /// A table's columns as clients see them, with the metadata JDBC's getColumns reads; none
    /// for a dataset that cannot be opened (one unreadable dataset must not hide the rest).
    async fn columns(&self, table: &TableRef) -> SchemaRef {
        match self.engine().open(table, None).await {
            Ok(dataset) => super::types::described(&wire_schema(&Schema::from(dataset.schema()))),
            Err(e) => {
                tracing::warn!(%table, error = %e, "a table cannot be opened");
                Arc::new(Schema::empty())
            }
        }
    }
}
