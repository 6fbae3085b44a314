//! The SQL classifier, case by case: what each statement is planned as (a read, which write)
//! or why it is refused, with the gRPC code a client sees.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use tonic::{Code, Status};

use super::{Planned, Write, plan};
use crate::catalog::{NamespaceName, TableName};
use crate::engine::{TableRef, Warehouse, WriteEngine};
use crate::manifest::ManifestStore;
use crate::store::EmbeddedStore;

/// What a statement should be classified as.
#[derive(Debug)]
enum Expect {
    Read,
    CreateSchema { if_not_exists: bool },
    CreateTable { as_select: bool, binary: bool },
    DropTable { if_exists: bool },
    Insert,
    Delete { predicate: Option<&'static str> },
    CopyInto,
    Restore,
    CreateIndex,
    DropIndex,
    Refused(Code, &'static str),
}

const CASES: &[(&str, Expect)] = &[
    ("SELECT 1", Expect::Read),
    ("SELECT id FROM s.t WHERE id > 1", Expect::Read),
    (
        "SELECT * FROM s.t WHERE id IN (SELECT id FROM s.t)",
        Expect::Read,
    ),
    ("EXPLAIN SELECT * FROM s.t", Expect::Read),
    ("SELECT * FROM information_schema.tables", Expect::Read),
    (
        "CREATE SCHEMA s2",
        Expect::CreateSchema {
            if_not_exists: false,
        },
    ),
    (
        "CREATE SCHEMA IF NOT EXISTS lake.s2",
        Expect::CreateSchema {
            if_not_exists: true,
        },
    ),
    (
        "CREATE TABLE s.u (id BIGINT)",
        Expect::CreateTable {
            as_select: false,
            binary: false,
        },
    ),
    (
        "CREATE TABLE s.u AS SELECT id FROM s.t",
        Expect::CreateTable {
            as_select: true,
            binary: false,
        },
    ),
    (
        "CREATE TABLE s.u (b VARBINARY)",
        Expect::CreateTable {
            as_select: false,
            binary: true,
        },
    ),
    (
        "DROP TABLE IF EXISTS s.t",
        Expect::DropTable { if_exists: true },
    ),
    ("DROP TABLE s.t", Expect::DropTable { if_exists: false }),
    ("INSERT INTO s.t VALUES (1), (2)", Expect::Insert),
    ("INSERT INTO s.t SELECT id + 10 FROM s.t", Expect::Insert),
    (
        "DELETE FROM s.t WHERE id = 1",
        Expect::Delete {
            predicate: Some("id = Int64(1)"),
        },
    ),
    ("DELETE FROM s.t", Expect::Delete { predicate: None }),
    ("COPY INTO s.t FROM 'in/rows.parquet'", Expect::CopyInto),
    ("RESTORE TABLE s.t TO VERSION 2", Expect::Restore),
    (
        "CREATE INDEX i ON s.t USING BTREE (id)",
        Expect::CreateIndex,
    ),
    ("DROP INDEX i ON s.t", Expect::DropIndex),
    ("SHOW INDEXES FROM s.t", Expect::Read),
    (
        "COPY (SELECT 1 AS a) TO '/tmp/out.csv' STORED AS CSV",
        Expect::Refused(Code::PermissionDenied, "COPY … TO writes files"),
    ),
    (
        "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc/passwd'",
        Expect::Refused(Code::PermissionDenied, "CREATE EXTERNAL TABLE reads files"),
    ),
    (
        "EXPLAIN ANALYZE INSERT INTO s.t VALUES (1)",
        Expect::Refused(Code::PermissionDenied, "inside EXPLAIN ANALYZE"),
    ),
    (
        "CREATE OR REPLACE TABLE s.u (id BIGINT)",
        Expect::Refused(Code::Unimplemented, "CREATE OR REPLACE TABLE"),
    ),
    // Text that does not tokenize is refused before any recogniser reads it, lake's own
    // statements included.
    (
        "SELECT 'never closed",
        Expect::Refused(Code::InvalidArgument, "SQL error"),
    ),
    (
        "COPY INTO s.t FROM 'never closed",
        Expect::Refused(Code::InvalidArgument, "SQL error"),
    ),
    (
        "RESTORE TABLE s.t TO TIMESTAMP 'never closed",
        Expect::Refused(Code::InvalidArgument, "SQL error"),
    ),
    (
        "INSERT OVERWRITE s.t VALUES (1)",
        Expect::Refused(Code::Unimplemented, "INSERT OVERWRITE"),
    ),
    (
        "CREATE VIEW s.v AS SELECT 1",
        Expect::Refused(Code::Unimplemented, "not supported"),
    ),
    (
        "SET datafusion.execution.batch_size = 1",
        Expect::Refused(Code::Unimplemented, "not supported"),
    ),
    (
        "CREATE TABLE u (id BIGINT)",
        Expect::Refused(Code::InvalidArgument, "needs a schema"),
    ),
    (
        "SELECT * FROM other.s.t",
        Expect::Refused(Code::NotFound, "table 'other.s.t' not found"),
    ),
    (
        "CREATE SCHEMA other.s2",
        Expect::Refused(Code::NotFound, "catalog \"other\" does not exist"),
    ),
    (
        "SELECT 1; SELECT 2",
        Expect::Refused(Code::InvalidArgument, "one SQL statement at a time"),
    ),
    (
        "",
        Expect::Refused(Code::InvalidArgument, "empty SQL statement"),
    ),
    (
        "DELETE FROM s.t, s.u",
        Expect::Refused(Code::InvalidArgument, "exactly one table"),
    ),
];

fn matches(planned: &Planned, expect: &Expect) -> bool {
    match (planned, expect) {
        (Planned::Read(_) | Planned::BoundRead { .. }, Expect::Read) => true,
        (
            Planned::Write(Write::CreateSchema {
                namespace,
                if_not_exists,
            }),
            Expect::CreateSchema { if_not_exists: e },
        ) => namespace.as_str() == "s2" && if_not_exists == e,
        (
            Planned::Write(Write::CreateTable {
                table,
                schema,
                rows,
                ..
            }),
            Expect::CreateTable { as_select, binary },
        ) => {
            table.to_string() == "s.u"
                && rows.is_some() == *as_select
                && (schema.field(0).data_type() == &DataType::Binary) == *binary
        }
        (
            Planned::Write(Write::DropTable { table, if_exists }),
            Expect::DropTable { if_exists: e },
        ) => table.to_string() == "s.t" && if_exists == e,
        (Planned::Write(Write::Insert { table, .. }), Expect::Insert) => table.to_string() == "s.t",
        (Planned::Write(Write::Delete { table, predicate }), Expect::Delete { predicate: e }) => {
            table.to_string() == "s.t"
                && predicate.as_ref().map(ToString::to_string).as_deref() == *e
        }
        (Planned::Write(Write::CopyInto(copy)), Expect::CopyInto) => {
            copy.table.to_string() == "s.t"
        }
        (Planned::Write(Write::Restore(restore)), Expect::Restore) => {
            restore.table.to_string() == "s.t"
        }
        (Planned::Write(Write::CreateIndex(index)), Expect::CreateIndex) => {
            index.table.to_string() == "s.t"
        }
        (Planned::Write(Write::DropIndex { table, .. }), Expect::DropIndex) => {
            table.to_string() == "s.t"
        }
        _ => false,
    }
}

#[tokio::test]
async fn every_statement_is_classified_as_what_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let kv = Arc::new(EmbeddedStore::open(&dir.path().join("manifests.redb"), true).unwrap());
    let engine = WriteEngine::new(
        Warehouse::Local(dir.path().join("warehouse")),
        ManifestStore::new(kv),
    );
    let t = TableRef::new(
        NamespaceName::parse("s").unwrap(),
        TableName::parse("t").unwrap(),
    );
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let rows =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1]))]).unwrap();
    engine.create(&t, schema, vec![rows]).await.unwrap();

    let pool = Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default());
    let disk = Arc::new(
        datafusion::execution::disk_manager::DiskManagerBuilder::default()
            .build()
            .unwrap(),
    );
    let sessions = super::Sessions::new(disk.clone()).unwrap();
    let mut wrong = Vec::new();
    for (sql, expect) in CASES {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let ctx = sessions
            .statement(
                engine.reader(),
                pool.clone(),
                disk.clone(),
                deadline,
                std::time::Duration::from_secs(60),
                &crate::flight::options::SessionOptions::default(),
            )
            .unwrap();
        let outcome = plan(&ctx, sql, None).await;
        let ok = match (&outcome, expect) {
            (Err(status), Expect::Refused(code, text)) => {
                status.code() == *code && status.message().contains(text)
            }
            (Ok(planned), expect) => matches(planned, expect),
            (Err(_), _) => false,
        };
        if !ok {
            wrong.push(format!("{sql:?}: expected {expect:?}, got {outcome:?}"));
        }
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

#[test]
fn a_status_relayed_as_text_keeps_its_code_and_message() {
    let status = Status::resource_exhausted("a join \"x\" of 3\nrows");
    assert_eq!(
        super::relayed(&status.to_string()),
        Some((
            tonic::Code::ResourceExhausted,
            "a join \"x\" of 3\nrows".to_owned(),
            false
        ))
    );
    let lost = Status::from_error(Box::new(std::io::Error::other("reset")));
    assert!(matches!(
        super::relayed(&lost.to_string()),
        Some((_, _, true))
    ));
    assert_eq!(super::relayed("an error of another kind"), None);
}

/// A statement whose values make a kernel fail is the client's error, with the kernel's words:
/// INVALID_ARGUMENT, not INTERNAL.
#[tokio::test]
async fn a_statement_failing_on_its_values_is_invalid_argument() {
    let ctx = datafusion::prelude::SessionContext::new();
    for (sql, says) in [
        ("SELECT 1 / 0", "Divide by zero"),
        ("SELECT CAST('abc' AS INT)", "Cannot cast string 'abc'"),
        ("SELECT CAST(300 AS TINYINT)", "300"),
        (
            "SELECT (SELECT column1 FROM (VALUES (1), (2)))",
            "more than one row",
        ),
    ] {
        let err = match ctx.sql(sql).await {
            Ok(frame) => frame.collect().await.expect_err(sql),
            Err(e) => e,
        };
        let status = super::status(err);
        assert_eq!(status.code(), Code::InvalidArgument, "{sql}: {status:?}");
        assert!(status.message().contains(says), "{sql}: {status:?}");
    }
}
