//! `lake-operator legacy-fixture`: a lake v1 shared table made from a v2 lake's two tables, for
//! tests, benches and trying the migration. The datasets are real (their manifest rows come from
//! real Lance commits, copied verbatim); the pointers and registry rows are what v1 held beside
//! them. `history` adds manifest rows of dropped datasets (v1 never deleted them; Lance never
//! does), so a table can be made as large as a long-lived v1 one without as many commits.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, PutRequest,
    ScalarAttributeType, WriteRequest,
};

use super::MigrationError;
use super::legacy::{self, Item};

/// Versions per dropped dataset in the history.
const HISTORY_VERSIONS: i64 = 100;

/// What the fixture holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FixtureSummary {
    pub manifest_rows: usize,
    pub pointers: usize,
    pub registry_rows: usize,
    pub history_rows: usize,
}

impl FixtureSummary {
    pub fn items(&self) -> usize {
        self.manifest_rows + self.pointers + self.registry_rows + self.history_rows
    }
}

/// Every item of `table` (consistent reads, all pages).
pub async fn scan(dynamodb: &Client, table: &str) -> Result<Vec<Item>, MigrationError> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = dynamodb
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(super::aws("Scan", table))?;
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return Ok(items),
        }
    }
}

/// The v1 items for a v2 lake's tables, plus `history` rows of dropped datasets.
pub fn legacy_items(
    manifest: &[Item],
    registry: &[Item],
    history: usize,
) -> (Vec<Item>, FixtureSummary) {
    let mut summary = FixtureSummary::default();
    let mut items = Vec::new();
    let mut latest: BTreeMap<String, i64> = BTreeMap::new();
    for row in manifest.iter().filter(|i| !legacy::is_marker(i)) {
        let dataset = row.get("base_uri").and_then(|v| v.as_s().ok()).cloned();
        let version = row
            .get("version")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<i64>().ok());
        if let (Some(dataset), Some(version)) = (dataset, version) {
            let newest = latest.entry(dataset).or_insert(version);
            *newest = (*newest).max(version);
        }
        items.push(row.clone());
        summary.manifest_rows += 1;
    }
    for (dataset, version) in &latest {
        items.push(legacy::pointer(dataset, *version));
        summary.pointers += 1;
    }
    for row in registry.iter().filter(|i| !legacy::is_marker(i)) {
        if let Some(row) = legacy::registry_row(row) {
            items.push(row);
            summary.registry_rows += 1;
        }
    }
    // Dropped datasets beside the live ones: `<warehouse>/_dropped/t<n>.lance` (no namespace
    // starts with `_`, so none collides with data).
    let warehouse = latest
        .keys()
        .next()
        .and_then(|d| d.rsplitn(3, '/').nth(2))
        .unwrap_or("warehouse")
        .to_owned();
    for n in 0..history {
        let dataset = format!(
            "{warehouse}/_dropped/t{}.lance",
            n as i64 / HISTORY_VERSIONS
        );
        let version = n as i64 % HISTORY_VERSIONS + 1;
        items.push(Item::from([
            ("base_uri".to_owned(), AttributeValue::S(dataset.clone())),
            ("version".to_owned(), AttributeValue::N(version.to_string())),
            (
                "path".to_owned(),
                AttributeValue::S(format!("{dataset}/_versions/{version}.manifest")),
            ),
            ("committer".to_owned(), AttributeValue::S("lake-v1".into())),
            ("size".to_owned(), AttributeValue::N("1024".into())),
        ]));
        summary.history_rows += 1;
    }
    (items, summary)
}

async fn create_table(dynamodb: &Client, table: &str) -> Result<(), MigrationError> {
    let attribute = |name: &str, kind| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
    };
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
    };
    let built = (|| {
        Ok::<_, aws_sdk_dynamodb::error::BuildError>((
            vec![
                attribute("base_uri", ScalarAttributeType::S)?,
                attribute("version", ScalarAttributeType::N)?,
            ],
            vec![
                key("base_uri", KeyType::Hash)?,
                key("version", KeyType::Range)?,
            ],
        ))
    })();
    let (attributes, keys) = built.map_err(|e| MigrationError::Aws {
        operation: "CreateTable",
        table: table.to_owned(),
        detail: e.to_string(),
        source: Some(Box::new(e)),
    })?;
    dynamodb
        .create_table()
        .table_name(table)
        .set_attribute_definitions(Some(attributes))
        .set_key_schema(Some(keys))
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(super::aws("CreateTable", table))?;
    Ok(())
}

/// Creates `into` (the manifest key schema) and fills it from `manifest_table` and
/// `registry_table` (BatchWriteItem, 25 at a time, retrying what DynamoDB left unprocessed).
pub async fn write(
    dynamodb: &Client,
    manifest_table: &str,
    registry_table: &str,
    into: &str,
    history: usize,
) -> Result<FixtureSummary, MigrationError> {
    let manifest = scan(dynamodb, manifest_table).await?;
    let registry = scan(dynamodb, registry_table).await?;
    let (items, summary) = legacy_items(&manifest, &registry, history);
    write_items(dynamodb, into, &items).await?;
    Ok(summary)
}

/// Creates `into` (the manifest key schema) holding `items`.
pub async fn write_items(
    dynamodb: &Client,
    into: &str,
    items: &[Item],
) -> Result<(), MigrationError> {
    create_table(dynamodb, into).await?;
    for chunk in items.chunks(25) {
        let mut requests: Vec<WriteRequest> = chunk
            .iter()
            .map(|item| {
                PutRequest::builder()
                    .set_item(Some(item.clone()))
                    .build()
                    .map(|put| WriteRequest::builder().put_request(put).build())
                    .map_err(|e| MigrationError::Aws {
                        operation: "BatchWriteItem",
                        table: into.to_owned(),
                        detail: e.to_string(),
                        source: Some(Box::new(e)),
                    })
            })
            .collect::<Result<_, _>>()?;
        while !requests.is_empty() {
            let out = dynamodb
                .batch_write_item()
                .request_items(into, requests)
                .send()
                .await
                .map_err(super::aws("BatchWriteItem", into))?;
            requests = out
                .unprocessed_items
                .and_then(|mut u| u.remove(into))
                .unwrap_or_default();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }
    fn n(v: i64) -> AttributeValue {
        AttributeValue::N(v.to_string())
    }

    #[test]
    fn a_v2_lake_becomes_rows_pointers_registry_and_history() {
        let row = |d: &str, v| {
            Item::from([
                ("base_uri".to_owned(), s(d)),
                ("version".to_owned(), n(v)),
                ("path".to_owned(), s("p")),
            ])
        };
        let manifest = vec![
            row("b/wh/sales/a.lance", 1),
            row("b/wh/sales/a.lance", 2),
            row("b/wh/sales/b.lance", 1),
            Item::from([
                ("base_uri".to_owned(), s("__lake__/authority")),
                ("version".to_owned(), n(0)),
            ]),
        ];
        let registry = vec![
            Item::from([
                ("pk".to_owned(), s("NAMESPACES")),
                ("sk".to_owned(), s("sales")),
            ]),
            Item::from([
                ("pk".to_owned(), s("__lake__")),
                ("sk".to_owned(), s("AUTHORITY")),
            ]),
        ];
        let (items, summary) = legacy_items(&manifest, &registry, 150);
        assert_eq!(
            summary,
            FixtureSummary {
                manifest_rows: 3,
                pointers: 2,
                registry_rows: 1,
                history_rows: 150
            }
        );
        assert_eq!(items.len(), summary.items());
        let pointers: Vec<_> = items
            .iter()
            .filter_map(|i| match legacy::classify(i) {
                Ok(legacy::LegacyItem::Pointer { dataset, latest }) => Some((dataset, latest)),
                _ => None,
            })
            .collect();
        assert_eq!(
            pointers,
            [
                ("b/wh/sales/a.lance".to_owned(), 2),
                ("b/wh/sales/b.lance".to_owned(), 1)
            ]
        );
        let history: Vec<&str> = items
            .iter()
            .filter_map(|i| i["base_uri"].as_s().ok().map(String::as_str))
            .filter(|b| b.contains("/_dropped/"))
            .collect();
        assert_eq!(history.len(), 150);
        assert!(
            history[0].starts_with("b/wh/_dropped/t0.lance"),
            "{history:?}"
        );
        assert!(history.contains(&"b/wh/_dropped/t1.lance"));
    }
}
