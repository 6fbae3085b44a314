//! `lake sql`: run one statement against a Flight SQL endpoint and print the result.

use std::io::Write;

use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned text table (reads the whole result first).
    Table,
    /// CSV with a header, streamed.
    Csv,
    /// One JSON object per row, streamed.
    Json,
    /// An Arrow IPC stream, streamed.
    Arrow,
}

#[derive(Debug, thiserror::Error)]
pub enum SqlClientError {
    #[error(transparent)]
    Connect(lake_client::ClientError),
    #[error("a grpc+tls:// endpoint needs --tls-ca: the PEM certificate of the CA to trust")]
    NoCa,
    #[error("{0}")]
    Server(String),
    #[error("writing the result: {0}")]
    Output(String),
}

fn server(e: arrow_flight::error::FlightError) -> SqlClientError {
    // The gRPC code and the server's message are what the user needs.
    match e {
        arrow_flight::error::FlightError::Tonic(status) => {
            SqlClientError::Server(format!("{:?}: {}", status.code(), status.message()))
        }
        other => SqlClientError::Server(other.to_string()),
    }
}

/// Runs `sql` at `endpoint` and writes the result to `out` in `format`.
pub async fn run(
    endpoint: &str,
    sql: &str,
    format: Format,
    token: Option<&str>,
    tls_ca: Option<Vec<u8>>,
    out: &mut (dyn Write + Send),
) -> Result<(), SqlClientError> {
    let mut client = lake_client::flight_sql(endpoint, token, tls_ca.as_deref())
        .await
        .map_err(|e| match e {
            lake_client::ClientError::NoCa => SqlClientError::NoCa,
            other => SqlClientError::Connect(other),
        })?;
    let info = client.execute(sql.to_owned(), None).await.map_err(server)?;
    let schema = std::sync::Arc::new(
        info.clone()
            .try_decode_schema()
            .map_err(|e| SqlClientError::Server(e.to_string()))?,
    );
    let output = |e: arrow::error::ArrowError| SqlClientError::Output(e.to_string());

    let mut table = Vec::new();
    let mut header_written = false;
    let mut ipc = match format {
        Format::Arrow => {
            Some(arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &schema).map_err(output)?)
        }
        _ => None,
    };
    for endpoint in info.endpoint {
        let Some(ticket) = endpoint.ticket else {
            continue;
        };
        let mut stream = client.do_get(ticket).await.map_err(server)?;
        while let Some(batch) = stream.try_next().await.map_err(server)? {
            write_batch(
                &batch,
                format,
                &mut table,
                &mut header_written,
                ipc.as_mut(),
                out,
            )?;
        }
    }
    match format {
        Format::Table => {
            let text = arrow::util::pretty::pretty_format_batches(&table).map_err(output)?;
            writeln!(out, "{text}").map_err(|e| SqlClientError::Output(e.to_string()))?;
        }
        Format::Arrow => {
            if let Some(mut writer) = ipc {
                writer.finish().map_err(output)?;
                let bytes = writer.into_inner().map_err(output)?;
                out.write_all(&bytes)
                    .map_err(|e| SqlClientError::Output(e.to_string()))?;
            }
        }
        Format::Csv if !header_written => {
            // No batch arrived: still print the header.
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(Vec::new());
            writer
                .write(&RecordBatch::new_empty(schema))
                .map_err(output)?;
            out.write_all(&writer.into_inner())
                .map_err(|e| SqlClientError::Output(e.to_string()))?;
        }
        Format::Csv | Format::Json => {}
    }
    out.flush()
        .map_err(|e| SqlClientError::Output(e.to_string()))
}

fn write_batch(
    batch: &RecordBatch,
    format: Format,
    table: &mut Vec<RecordBatch>,
    header_written: &mut bool,
    ipc: Option<&mut arrow::ipc::writer::StreamWriter<Vec<u8>>>,
    out: &mut (dyn Write + Send),
) -> Result<(), SqlClientError> {
    let output = |e: arrow::error::ArrowError| SqlClientError::Output(e.to_string());
    let io = |e: std::io::Error| SqlClientError::Output(e.to_string());
    match format {
        Format::Table => table.push(batch.clone()),
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(!*header_written)
                .build(Vec::new());
            writer.write(batch).map_err(output)?;
            out.write_all(&writer.into_inner()).map_err(io)?;
            *header_written = true;
        }
        Format::Json => {
            let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
            writer.write(batch).map_err(output)?;
            writer.finish().map_err(output)?;
            out.write_all(&writer.into_inner()).map_err(io)?;
        }
        Format::Arrow => {
            if let Some(writer) = ipc {
                writer.write(batch).map_err(output)?;
                out.write_all(writer.get_ref()).map_err(io)?;
                writer.get_mut().clear();
            }
        }
    }
    Ok(())
}
