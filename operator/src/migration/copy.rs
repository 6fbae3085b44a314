//! The copy: every segment of the legacy table page by page, in parallel, each page's items
//! written to the split tables and then its checkpoint saved (the next page's start, the items
//! read and written, the digest of what was read).

use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex;

use super::legacy::{self, Item, LegacyItem, SetDigest};
use super::{Checkpoint, MigrationError, SEGMENTS, Tables, aws, failed, progress, scan};
use crate::crd::{MigrationPhase, MigrationStatus};

/// Conditional puts in flight per segment.
const WRITERS: usize = 16;

/// Where a legacy item goes, and its key there.
pub(super) fn destination<'a>(
    tables: &'a Tables,
    item: &LegacyItem,
) -> Option<(&'a str, Item, Item)> {
    match item {
        LegacyItem::Manifest(i) => Some((
            tables.manifest.as_str(),
            legacy::key_of(i, legacy::MANIFEST_KEY),
            i.clone(),
        )),
        LegacyItem::Registry(i) => Some((
            tables.registry.as_str(),
            legacy::key_of(i, legacy::REGISTRY_KEY),
            i.clone(),
        )),
        LegacyItem::Pointer { .. } => None,
    }
}

/// Writes `item`. A manifest row (immutable: Lance never rewrites a version) only where its key
/// is free — an identical row there counts as written, another is left for verify to report. A
/// registry row (v1 updated them in place) is written as the source holds it now: before the
/// cutover nothing but the migration writes the split tables (they held nothing when it began,
/// and no workload points at them), so there is nothing newer to lose, and a row re-read after
/// a kill may have changed since its first copy.
async fn put(
    dynamodb: &Client,
    table: &str,
    key: Item,
    item: Item,
) -> Result<bool, MigrationError> {
    let mutable = key.contains_key("pk");
    let mut request = dynamodb
        .put_item()
        .table_name(table)
        .set_item(Some(item.clone()));
    if !mutable {
        request = request
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", "base_uri");
    }
    match request.send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            let existing = dynamodb
                .get_item()
                .table_name(table)
                .set_key(Some(key))
                .consistent_read(true)
                .send()
                .await
                .map_err(aws("GetItem", table))?;
            // A different item under the key is left alone: verify reports it.
            Ok(existing
                .item
                .is_some_and(|e| legacy::item_digest(&e) == legacy::item_digest(&item)))
        }
        Err(e) => Err(aws("PutItem", table)(e)),
    }
}

/// Copies until every segment is done, one fails, or `deadline` passes (the pass then ends and
/// the next resumes from the checkpoints).
pub(super) async fn copy(
    dynamodb: &Client,
    tables: &Tables,
    status: MigrationStatus,
    checkpoint: &dyn Checkpoint,
    deadline: Instant,
) -> Result<MigrationStatus, MigrationError> {
    let shared = Arc::new(Mutex::new(status));
    // Boxed: a stream of borrowing futures is not provably Send to the controller otherwise.
    let segments: Vec<BoxFuture<'_, Result<(), MigrationError>>> = (0..SEGMENTS)
        .map(|segment| {
            Box::pin(copy_segment(
                dynamodb, tables, segment, &shared, checkpoint, deadline,
            )) as BoxFuture<'_, _>
        })
        .collect();
    futures::future::try_join_all(segments).await?;
    let status = shared.lock().await.clone();
    Ok(status)
}

async fn copy_segment(
    dynamodb: &Client,
    tables: &Tables,
    segment: i32,
    shared: &Mutex<MigrationStatus>,
    checkpoint: &dyn Checkpoint,
    deadline: Instant,
) -> Result<(), MigrationError> {
    let index = segment as usize;
    loop {
        let (start, digest) = {
            let status = shared.lock().await;
            let seg = &status.segments[index];
            if seg.done || status.phase == MigrationPhase::Failed || Instant::now() > deadline {
                return Ok(());
            }
            (seg.last_key.clone(), seg.digest.clone())
        };
        let (items, next) = scan::page(dynamodb, &tables.source, segment, start.as_ref()).await?;
        let mut digest = SetDigest::parse(&digest).unwrap_or_default();
        let mut writes = Vec::new();
        for item in &items {
            digest.add(item);
            match legacy::classify(item) {
                Ok(classified) => writes.extend(destination(tables, &classified)),
                // Not retried: the same item would fail every pass. Nothing of its page is
                // written; the reason names it.
                Err(e) => {
                    let mut status = shared.lock().await;
                    *status = failed(
                        status.clone(),
                        MigrationPhase::Copying,
                        format!(
                            "{e}; fix or remove it in the legacy table, then start again \
                             (docs/guides/migration.md, \"Starting again\")"
                        ),
                    );
                    checkpoint.save(&status).await?;
                    return Ok(());
                }
            }
        }
        let puts: Vec<BoxFuture<'_, Result<bool, MigrationError>>> = writes
            .into_iter()
            .map(|(table, key, item)| Box::pin(put(dynamodb, table, key, item)) as BoxFuture<'_, _>)
            .collect();
        let written: Vec<bool> = futures::stream::iter(puts)
            .buffer_unordered(WRITERS)
            .try_collect()
            .await?;
        let copied = written.into_iter().filter(|w| *w).count() as i64;
        let mut status = shared.lock().await;
        if status.phase == MigrationPhase::Failed {
            return Ok(());
        }
        let seg = &mut status.segments[index];
        seg.scanned += items.len() as i64;
        seg.copied += copied;
        seg.digest = digest.hex();
        seg.done = next.is_none();
        seg.last_key = next;
        progress(&mut status);
        // Saved under the lock: checkpoints are written in order.
        checkpoint.save(&status).await?;
    }
}
