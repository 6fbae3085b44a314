//! TPC-H (lake_testkit::tpch) in a lake, each table in several commits so that it has many
//! fragments to deal out.

use lake_client::LakeClient;
pub(super) use lake_testkit::tpch::QUERIES;
use lake_testkit::tpch::{TABLES, load};

/// TPC-H at `scale` in schema `tpch`; lineitem and orders in `parts` commits, the smaller
/// tables in fewer.
pub(super) async fn generate(client: &LakeClient, scale: f64, parts: i32) {
    let tables: Vec<(&str, i32)> = TABLES
        .into_iter()
        .map(|table| match table {
            "region" | "nation" => (table, 1),
            "orders" | "lineitem" => (table, parts),
            _ => (table, 3),
        })
        .collect();
    load(client, scale, &tables).await;
}
