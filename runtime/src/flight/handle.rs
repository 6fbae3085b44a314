//! Statement handles: what a client holds between GetFlightInfo (or CreatePreparedStatement) and
//! DoGet. The server stays stateless — a handle carries its SQL, bound parameters or a write's
//! row count — so handles are authenticated: HMAC-SHA256 under a key made at process start. A
//! client can neither forge one nor change the SQL or parameters inside, and decoding is bounded
//! (a forged handle once carried a compressed parameter batch declaring 2^45 bytes).

use arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tonic::Status;

use super::options::SessionOptions;

type HmacSha256 = Hmac<Sha256>;
const TAG_LEN: usize = 32;
/// Bound parameters of one statement, as Arrow IPC: far more than a row of values needs.
pub(super) const MAX_PARAMS_BYTES: usize = 1024 * 1024;
/// Bound rows one prepared update may carry (JDBC's `executeBatch`, ADBC's `executemany`). They
/// are held as one `VALUES` of literals until the write commits, about ten times their Arrow size
/// for narrow rows: 4 MiB (some 100,000 rows of two columns) stays well inside a query's memory.
/// Bulk loads go through ingest, which streams.
pub(super) const MAX_BATCH_PARAMS_BYTES: usize = 4 * 1024 * 1024;
/// The largest handle accepted: the SQL and parameters, JSON-encoded.
const MAX_HANDLE_BYTES: usize = 16 * 1024 * 1024;

/// What a handle stands for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) enum Handle {
    Sql(String),
    /// A prepared statement with bound parameters (one row, as an Arrow IPC stream).
    Bound {
        sql: String,
        params: Vec<u8>,
    },
    /// A write already done at GetFlightInfo (ADBC sends DDL as a query): its row count.
    Done(i64),
    /// A ticket for a statement GetFlightInfo planned: `id` names the plan it kept (see
    /// `plans.rs`), `statement` plans it again when that plan is gone.
    Planned {
        id: u64,
        statement: Box<Handle>,
    },
    /// A statement with the session options (`options.rs`) it was issued in, as that session's
    /// cookie header (empty: the defaults): planned again under them whatever cookies a later
    /// call (a DoGet after the kept plan expired, an execution after SetSessionOptions) brings.
    InSession {
        options: String,
        statement: Box<Handle>,
    },
}

impl Handle {
    /// The session options the handle was issued under, if it carries them.
    pub(super) fn options(&self) -> Option<SessionOptions> {
        match self {
            Handle::InSession { options, .. } => Some(SessionOptions::from_header(options)),
            Handle::Planned { statement, .. } => statement.options(),
            _ => None,
        }
    }

    /// The session `options` a statement handle runs under: its own if it carries them (it was
    /// issued in a session), else `call`'s.
    pub(super) fn options_or(&self, call: SessionOptions) -> SessionOptions {
        self.options().unwrap_or(call)
    }

    /// This handle, carrying `options` if it carries none yet — the defaults too: a statement
    /// prepared before SetSessionOptions chose a schema still reads the tables it described.
    pub(super) fn in_session(self, options: &SessionOptions) -> Handle {
        if self.options().is_some() {
            return self;
        }
        Handle::InSession {
            options: options.header(),
            statement: Box::new(self),
        }
    }

    /// The statement's SQL, its bound values left undecoded (a DoPut binding new ones).
    pub(super) fn sql(self) -> Result<String, Status> {
        match self {
            Handle::Sql(sql) | Handle::Bound { sql, .. } => Ok(sql),
            Handle::Planned { statement, .. } | Handle::InSession { statement, .. } => {
                statement.sql()
            }
            Handle::Done(_) => Err(Status::invalid_argument("unknown prepared statement")),
        }
    }

    /// The SQL and bound parameters of a statement handle.
    pub(super) fn statement(self) -> Result<(String, Option<Vec<ScalarValue>>), Status> {
        match self {
            Handle::Sql(sql) => Ok((sql, None)),
            Handle::Bound { sql, params } => Ok((sql, Some(params_from_ipc(&params)?))),
            Handle::Planned { statement, .. } | Handle::InSession { statement, .. } => {
                statement.statement()
            }
            Handle::Done(_) => Err(Status::invalid_argument("unknown prepared statement")),
        }
    }
}

/// Encodes and authenticates handles with this process's key.
#[derive(Clone)]
pub(super) struct HandleCodec {
    key: [u8; 32],
}

impl std::fmt::Debug for HandleCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleCodec(..)")
    }
}

impl HandleCodec {
    /// A codec with a fresh random key (two v4 UUIDs: 244 random bits from the OS).
    pub(super) fn new() -> Self {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self { key }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length.
        HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!())
    }

    /// `tag ‖ json`.
    pub(super) fn encode(&self, handle: &Handle) -> Vec<u8> {
        let body = serde_json::to_vec(handle).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&body);
        let mut out = mac.finalize().into_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// A handle this process issued, or INVALID_ARGUMENT (forged, altered, from another process
    /// — e.g. before a restart — or too large).
    pub(super) fn decode(&self, bytes: &[u8]) -> Result<Handle, Status> {
        let unknown = || Status::invalid_argument("unknown statement handle");
        if bytes.len() > MAX_HANDLE_BYTES || bytes.len() < TAG_LEN {
            return Err(unknown());
        }
        let (tag, body) = bytes.split_at(TAG_LEN);
        let mut mac = self.mac();
        mac.update(body);
        mac.verify_slice(tag).map_err(|_| unknown())?;
        serde_json::from_slice(body).map_err(|_| unknown())
    }
}

pub(super) fn params_to_ipc(batch: &RecordBatch) -> Result<Vec<u8>, Status> {
    let internal = |e: arrow::error::ArrowError| Status::internal(e.to_string());
    let mut bytes = Vec::new();
    let mut writer =
        arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema()).map_err(internal)?;
    writer.write(batch).map_err(internal)?;
    writer.finish().map_err(internal)?;
    drop(writer);
    if bytes.len() > MAX_PARAMS_BYTES {
        return Err(Status::invalid_argument(format!(
            "bound parameters take {} bytes; at most {MAX_PARAMS_BYTES} are accepted",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The one row of parameters `params_to_ipc` wrote (uncompressed: this process wrote it).
pub(super) fn params_from_ipc(bytes: &[u8]) -> Result<Vec<ScalarValue>, Status> {
    let bad = |e: String| Status::invalid_argument(format!("bad bound parameters: {e}"));
    if bytes.len() > MAX_PARAMS_BYTES {
        return Err(bad(format!("more than {MAX_PARAMS_BYTES} bytes")));
    }
    let mut reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| bad(e.to_string()))?;
    let batch = reader
        .next()
        .transpose()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("no parameter row".into()))?;
    if batch.num_rows() != 1 {
        return Err(bad(format!(
            "{} rows; exactly one is bound",
            batch.num_rows()
        )));
    }
    batch
        .columns()
        .iter()
        .map(|c| ScalarValue::try_from_array(c, 0).map_err(|e| bad(e.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use tonic::metadata::MetadataMap;

    use super::*;

    fn row(n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![7; n])),
                Arc::new(StringArray::from(vec!["x"; n])),
            ],
        )
        .unwrap()
    }

    /// A DoPut binding new values reads only the statement's SQL: the values bound before are
    /// not decoded (they are not valid IPC here).
    #[test]
    fn a_handle_names_its_sql_without_decoding_its_values() {
        let bound = || Handle::Bound {
            sql: "SELECT $1".into(),
            params: vec![1, 2, 3],
        };
        let wrapped = Handle::Planned {
            id: 1,
            statement: Box::new(bound().in_session(&SessionOptions::default())),
        };
        for handle in [bound(), wrapped] {
            assert!(handle.clone().statement().is_err(), "{handle:?}");
            assert_eq!(handle.sql().unwrap(), "SELECT $1");
        }
        assert!(Handle::Done(1).sql().is_err());
    }

    #[test]
    fn handles_round_trip_and_refuse_tampering() {
        let codec = HandleCodec::new();
        let bound = Handle::Bound {
            sql: "SELECT ?".into(),
            params: params_to_ipc(&row(1)).unwrap(),
        };
        let planned = Handle::Planned {
            id: 9,
            statement: Box::new(Handle::Sql("SELECT 2".into())),
        };
        let cases = [
            Handle::Sql("SELECT 1".into()),
            bound,
            Handle::Done(3),
            planned,
        ];
        for handle in cases {
            let bytes = codec.encode(&handle);
            assert_eq!(codec.decode(&bytes).unwrap(), handle);
            // Every single-bit change anywhere is refused.
            for i in [0, TAG_LEN - 1, TAG_LEN, bytes.len() - 1] {
                let mut altered = bytes.clone();
                altered[i] ^= 1;
                assert!(codec.decode(&altered).is_err(), "bit flip at {i} accepted");
            }
            // Another process (another key) refuses it.
            assert!(HandleCodec::new().decode(&bytes).is_err());
        }
        for forged in [
            &b""[..],
            b"{\"Sql\":\"SELECT 1\"}",
            &[0u8; TAG_LEN],
            &vec![b'a'; MAX_HANDLE_BYTES + 1],
        ] {
            assert_eq!(
                codec.decode(forged).unwrap_err().code(),
                tonic::Code::InvalidArgument
            );
        }
    }

    #[test]
    fn a_handle_keeps_the_default_session_it_was_issued_in() {
        let issued = Handle::Sql("SELECT * FROM t".into()).in_session(&SessionOptions::default());
        assert_eq!(issued.options(), Some(SessionOptions::default()));
        let mut later = MetadataMap::new();
        later.insert("cookie", "lake_schema=sales".parse().unwrap());
        assert_eq!(
            issued.options_or(SessionOptions::from_metadata(&later)),
            SessionOptions::default()
        );
    }

    #[test]
    fn parameters_are_exactly_one_row() {
        assert_eq!(
            params_from_ipc(&params_to_ipc(&row(1)).unwrap())
                .unwrap()
                .len(),
            2
        );
        for n in [0, 2] {
            let err = params_from_ipc(&params_to_ipc(&row(n)).unwrap()).unwrap_err();
            assert!(err.message().contains("exactly one"), "{n}: {err}");
        }
        assert!(params_from_ipc(b"not ipc").is_err());
    }
}
