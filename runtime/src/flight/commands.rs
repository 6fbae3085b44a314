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

/// Datasets GetTables opens at once for their schemas.
const OPEN_AT_ONCE: usize = 8;

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

/// The schema of GetExportedKeys, GetImportedKeys and GetCrossReference (the Flight SQL spec's).
pub(super) fn foreign_keys_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// Lake tables have no foreign keys: every key command's answer is empty (BI tools ask on
/// connect and when browsing a table, and expect an empty result, not an error).
pub(super) fn no_foreign_keys() -> Response<DoGetStream> {
    let schema = foreign_keys_schema();
    single(Ok(RecordBatch::new_empty(schema.clone())), schema)
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
    /// GetDbSchemas: the namespaces of the warehouse as it is now (listing it takes one of the
    /// endpoint's slots and keeps its time limit, like a query).
    pub(super) async fn schemas(
        &self,
        query: CommandGetDbSchemas,
    ) -> Result<Response<DoGetStream>, Status> {
        let catalog = self.governor.governed(self.catalog()).await?;
        let mut builder = query.into_builder();
        for (ns, _) in catalog.tables() {
            builder.append(CATALOG, ns);
        }
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    /// GetTables: every table, with its columns' types if asked (`include_schema`: every
    /// dataset is opened, a few at a time). Like a query, it takes one of the endpoint's slots
    /// and keeps its time limit.
    pub(super) async fn tables(
        &self,
        query: CommandGetTables,
    ) -> Result<Response<DoGetStream>, Status> {
        self.governor.governed(self.tables_now(query)).await
    }

    async fn tables_now(&self, query: CommandGetTables) -> Result<Response<DoGetStream>, Status> {
        use futures::StreamExt;
        let include_schema = query.include_schema;
        let catalog = self.catalog().await?;
        let mut tables = Vec::new();
        for (ns, names) in catalog.tables() {
            let namespace =
                NamespaceName::parse(ns).map_err(|e| Status::internal(e.to_string()))?;
            for name in names {
                tables.push(TableRef::new(namespace.clone(), name.clone()));
            }
        }
        let schemas: Vec<SchemaRef> = if include_schema {
            let opened = tables.iter().cloned().map(|table| {
                let this = self.clone();
                async move { this.columns(&table).await }
            });
            futures::stream::iter(opened)
                .buffered(OPEN_AT_ONCE)
                .collect()
                .await
        } else {
            std::iter::repeat_n(Arc::new(Schema::empty()), tables.len()).collect()
        };
        let mut builder = query.into_builder();
        for (table, table_schema) in tables.iter().zip(&schemas) {
            builder
                .append(
                    CATALOG,
                    table.namespace.as_str(),
                    table.table.as_str(),
                    "TABLE",
                    table_schema,
                )
                .map_err(|e| Status::internal(e.to_string()))?;
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
