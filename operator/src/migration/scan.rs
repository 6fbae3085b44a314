//! Reading the legacy table: one page of one segment of a parallel Scan at a time (the only call
//! the migration ever makes on it), and its key schema, checked before anything is copied.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeyType, ScalarAttributeType};

use super::legacy::Item;
use super::{MigrationError, PAGE, SEGMENTS, aws};
use crate::crd::ScanKey;

fn scan_key(source: &str, key: &Item) -> Result<ScanKey, MigrationError> {
    let part = |name: &str, s: bool| {
        key.get(name).and_then(|v| {
            if s {
                v.as_s().ok().cloned()
            } else {
                v.as_n().ok().cloned()
            }
        })
    };
    match (part("base_uri", true), part("version", false)) {
        (Some(base_uri), Some(version)) => Ok(ScanKey { base_uri, version }),
        // Never read as "no more pages": that would end a segment early and verify the rest
        // away.
        _ => Err(MigrationError::Aws {
            operation: "Scan",
            table: source.to_owned(),
            detail: format!("the scan's next key {key:?} is not a (base_uri S, version N) key"),
            source: None,
        }),
    }
}

fn start_key(key: &ScanKey) -> Item {
    Item::from([
        (
            "base_uri".to_owned(),
            AttributeValue::S(key.base_uri.clone()),
        ),
        ("version".to_owned(), AttributeValue::N(key.version.clone())),
    ])
}

/// One page of `segment`, from `start`; the next page's start, `None` at the segment's end.
pub(super) async fn page(
    dynamodb: &Client,
    source: &str,
    segment: i32,
    start: Option<&ScanKey>,
) -> Result<(Vec<Item>, Option<ScanKey>), MigrationError> {
    let page = dynamodb
        .scan()
        .table_name(source)
        .segment(segment)
        .total_segments(SEGMENTS)
        .limit(PAGE)
        .consistent_read(true)
        .set_exclusive_start_key(start.map(start_key))
        .send()
        .await
        .map_err(aws("Scan", source))?;
    let next = page
        .last_evaluated_key()
        .map(|key| scan_key(source, key))
        .transpose()?;
    Ok((page.items.unwrap_or_default(), next))
}

/// Why `source` cannot be a lake v1 table, if it cannot: its key schema must be the manifest
/// table's (`base_uri` S hash, `version` N range).
pub(super) async fn schema_problem(
    dynamodb: &Client,
    source: &str,
) -> Result<Option<String>, MigrationError> {
    let described = dynamodb
        .describe_table()
        .table_name(source)
        .send()
        .await
        .map_err(aws("DescribeTable", source))?;
    let Some(table) = described.table else {
        return Ok(Some("DescribeTable returned no table".into()));
    };
    let keys: Vec<(String, KeyType)> = table
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
        .collect();
    let types: Vec<(String, ScalarAttributeType)> = table
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name().to_owned(), a.attribute_type().clone()))
        .collect();
    let want_keys = [
        ("base_uri".to_owned(), KeyType::Hash),
        ("version".to_owned(), KeyType::Range),
    ];
    let typed =
        |name: &str, kind: ScalarAttributeType| types.iter().any(|(n, t)| n == name && *t == kind);
    if keys != want_keys
        || !typed("base_uri", ScalarAttributeType::S)
        || !typed("version", ScalarAttributeType::N)
    {
        tracing::warn!(
            table = source,
            ?keys,
            "a migration source that is not a lake v1 table"
        );
        return Ok(Some(
            "its key schema is not a lake v1 table's (base_uri S hash, version N range)".into(),
        ));
    }
    Ok(None)
}
