//! Loads TPC-H (lake_testkit::tpch) into a lake through its own ingest, each table in several
//! commits so that it has many fragments to deal out.

use lake_client::{IngestMode, LakeClient};
pub(super) use lake_testkit::tpch::QUERIES;
use lake_testkit::tpch::{TABLES, generate as rows};

/// TPC-H at `scale` in schema `tpch`; lineitem and orders in `parts` commits, the smaller
/// tables in fewer.
pub(super) async fn generate(client: &LakeClient, scale: f64, parts: i32) {
    client.execute("CREATE SCHEMA tpch").await.unwrap();
    for table in TABLES {
        let parts = match table {
            "region" | "nation" => 1,
            "orders" | "lineitem" => parts,
            _ => 3,
        };
        for part in 1..=parts {
            let mode = if part == 1 {
                IngestMode::Create
            } else {
                IngestMode::Append
            };
            client
                .ingest("tpch", table, mode, rows(table, scale, part, parts))
                .await
                .unwrap_or_else(|e| panic!("loading tpch.{table} part {part}: {e}"));
        }
    }
}
