//! Tables: observe, then create or adopt, then bring what the operator manages up to date
//! (deletion protection, point-in-time recovery, tags, the marker). Every write happens only when
//! the observed state differs, so a converged cluster costs reads only.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    PointInTimeRecoverySpecification, ScalarAttributeType, TableStatus, Tag,
};
use lake_common::schema::{
    AttributeType, Authority, KeySchema, MARKER_CLUSTER_ATTR, MARKER_FORMAT_ATTR, Marker,
    MarkerRange,
};

use super::error::{ApplyError, aws};
use crate::plan::DesiredTable;

/// What reconcile learned about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedTable {
    pub name: String,
    pub authority: Authority,
    pub arn: Option<String>,
    /// The table existed and was not created by this cluster.
    pub adopted: bool,
}

fn scalar(t: AttributeType) -> ScalarAttributeType {
    match t {
        AttributeType::S => ScalarAttributeType::S,
        AttributeType::N => ScalarAttributeType::N,
    }
}

fn describe_schema(elements: &[KeySchemaElement], attrs: &[AttributeDefinition]) -> String {
    elements
        .iter()
        .map(|e| {
            let t = attrs
                .iter()
                .find(|a| a.attribute_name() == e.attribute_name())
                .map(|a| a.attribute_type().as_str().to_owned())
                .unwrap_or_default();
            format!("{} {}:{t}", e.key_type().as_str(), e.attribute_name())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn expected_schema(schema: KeySchema) -> String {
    format!(
        "HASH {}:{:?}, RANGE {}:{:?}",
        schema.hash.name,
        schema.hash.attribute_type,
        schema.range.name,
        schema.range.attribute_type
    )
}

fn schema_matches(
    schema: KeySchema,
    elements: &[KeySchemaElement],
    attrs: &[AttributeDefinition],
) -> bool {
    let has = |name: &str, kind: KeyType, t: AttributeType| {
        elements
            .iter()
            .any(|e| e.attribute_name() == name && *e.key_type() == kind)
            && attrs
                .iter()
                .any(|a| a.attribute_name() == name && *a.attribute_type() == scalar(t))
    };
    elements.len() == 2
        && has(schema.hash.name, KeyType::Hash, schema.hash.attribute_type)
        && has(
            schema.range.name,
            KeyType::Range,
            schema.range.attribute_type,
        )
}

/// The key of `authority`'s marker item, as DynamoDB takes it.
pub(crate) fn marker_key(authority: Authority) -> HashMap<String, AttributeValue> {
    let schema = authority.key_schema();
    let key = authority.marker_key();
    let range = match key.range {
        MarkerRange::Number(n) => AttributeValue::N(n.to_string()),
        MarkerRange::String(s) => AttributeValue::S(s.to_owned()),
    };
    HashMap::from([
        (
            schema.hash.name.to_owned(),
            AttributeValue::S(key.hash.to_owned()),
        ),
        (schema.range.name.to_owned(), range),
    ])
}

async fn read_marker(
    client: &Client,
    table: &str,
    authority: Authority,
) -> Result<Option<Marker>, ApplyError> {
    let item = client
        .get_item()
        .table_name(table)
        .set_key(Some(marker_key(authority)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| aws("GetItem", table, e))?
        .item;
    Ok(item.map(|item| {
        let text = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        Marker {
            format: text(MARKER_FORMAT_ATTR),
            cluster: text(MARKER_CLUSTER_ATTR),
        }
    }))
}

async fn create(client: &Client, desired: &DesiredTable) -> Result<(), ApplyError> {
    let schema = desired.key_schema;
    let invalid = |e: aws_sdk_dynamodb::error::BuildError| ApplyError::Aws {
        operation: "CreateTable",
        resource: desired.name.clone(),
        detail: e.to_string(),
        source: Some(Box::new(e)),
    };
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(invalid)
    };
    let attr = |name: &str, t| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(scalar(t))
            .build()
            .map_err(invalid)
    };
    let tags = desired
        .tags
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build().map_err(invalid))
        .collect::<Result<Vec<_>, _>>()?;
    client
        .create_table()
        .table_name(&desired.name)
        .key_schema(key(schema.hash.name, KeyType::Hash)?)
        .key_schema(key(schema.range.name, KeyType::Range)?)
        .attribute_definitions(attr(schema.hash.name, schema.hash.attribute_type)?)
        .attribute_definitions(attr(schema.range.name, schema.range.attribute_type)?)
        .billing_mode(BillingMode::PayPerRequest)
        .deletion_protection_enabled(desired.deletion_protection)
        .set_tags(Some(tags))
        .send()
        .await
        .map_err(|e| aws("CreateTable", &desired.name, e))?;
    Ok(())
}

/// The table named `name`, or `None` if there is none.
async fn describe(
    client: &Client,
    name: &str,
) -> Result<Option<aws_sdk_dynamodb::types::TableDescription>, ApplyError> {
    match client.describe_table().table_name(name).send().await {
        Ok(out) => Ok(out.table),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(aws("DescribeTable", name, e)),
    }
}

/// Observes `desired` and makes it so. Never modifies a table it may not adopt: one another
/// cluster created or adopted (its uid tags, checked before the marker, so a table another
/// cluster has just created and not yet marked is not taken), one with another cluster's marker,
/// and — unless `may_adopt` (the administrator's consent) — any existing table it did not create.
pub async fn ensure(
    client: &Client,
    desired: &DesiredTable,
    may_adopt: bool,
) -> Result<AppliedTable, ApplyError> {
    let name = desired.name.as_str();
    let described = describe(client, name).await?;
    let uid_tag = crate::plan::tables::TAG_CLUSTER_UID;
    let (table, created_now) = match described {
        Some(table) => (table, false),
        None => {
            create(client, desired).await?;
            let table = client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .map_err(|e| aws("DescribeTable", name, e))?
                .table
                .ok_or_else(|| ApplyError::NotActive {
                    table: name.to_owned(),
                    status: "missing after CreateTable".into(),
                })?;
            (table, true)
        }
    };

    if !schema_matches(
        desired.key_schema,
        table.key_schema(),
        table.attribute_definitions(),
    ) {
        tracing::warn!(
            table = name,
            found = %describe_schema(table.key_schema(), table.attribute_definitions()),
            "an existing table with another key schema is not adopted"
        );
        return Err(ApplyError::KeySchemaMismatch {
            table: name.to_owned(),
            authority: desired.authority.to_string(),
            expected: expected_schema(desired.key_schema),
        });
    }
    let status = table.table_status().cloned();
    if status != Some(TableStatus::Active) {
        return Err(ApplyError::NotActive {
            table: name.to_owned(),
            status: status.map(|s| s.as_str().to_owned()).unwrap_or_default(),
        });
    }
    let arn = table.table_arn().map(str::to_owned);
    let mut existing_tags = match &arn {
        Some(arn) => tags_of(client, name, arn).await?,
        None => HashMap::new(),
    };
    let uid = desired.tags.get(uid_tag).map(String::as_str);
    if let (Some(from), Some(uid), Some(arn)) = (desired.reattach_from.as_deref(), uid, &arn)
        && from != uid
    {
        reattach(
            client,
            desired,
            arn,
            from,
            uid,
            may_adopt,
            &mut existing_tags,
        )
        .await?;
    }
    let adopted_tag = crate::plan::tables::TAG_ADOPTED_BY_UID;
    for (tag, what) in [
        (uid_tag, "another cluster created it"),
        (adopted_tag, "another cluster adopted it"),
    ] {
        if let Some(other) = existing_tags.get(tag).filter(|v| Some(v.as_str()) != uid) {
            tracing::warn!(table = name, tag, owner = %other, "another cluster's table is not adopted");
            return Err(ApplyError::MarkerConflict {
                table: name.to_owned(),
                detail: what,
            });
        }
    }
    let created_by_us = created_now || existing_tags.get(uid_tag).map(String::as_str) == uid;
    // Check the marker before touching anything: another cluster's table is never modified.
    let marker = read_marker(client, name, desired.authority).await?;
    if let Some(found) = &marker
        && found != &desired.marker
    {
        tracing::warn!(
            table = name,
            format = %found.format,
            cluster = %found.cluster,
            "a table marked for another cluster or authority is not adopted"
        );
        let detail = if found.format != desired.marker.format {
            "it holds another authority's marker"
        } else {
            "its marker names another cluster"
        };
        return Err(ApplyError::MarkerConflict {
            table: name.to_owned(),
            detail,
        });
    }
    if !created_by_us && marker.is_none() && !may_adopt {
        return Err(ApplyError::AdoptionRefused {
            table: name.to_owned(),
        });
    }

    if desired.deletion_protection && table.deletion_protection_enabled() != Some(true) {
        client
            .update_table()
            .table_name(name)
            .deletion_protection_enabled(true)
            .send()
            .await
            .map_err(|e| aws("UpdateTable", name, e))?;
    }
    if desired.point_in_time_recovery {
        let backups = client
            .describe_continuous_backups()
            .table_name(name)
            .send()
            .await
            .map_err(|e| aws("DescribeContinuousBackups", name, e))?;
        let enabled = backups
            .continuous_backups_description()
            .and_then(|d| d.point_in_time_recovery_description())
            .and_then(|p| p.point_in_time_recovery_status())
            .is_some_and(|s| s.as_str() == "ENABLED");
        if !enabled {
            let spec = PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(true)
                .build()
                .map_err(|e| ApplyError::Aws {
                    operation: "UpdateContinuousBackups",
                    resource: name.to_owned(),
                    detail: e.to_string(),
                    source: Some(Box::new(e)),
                })?;
            client
                .update_continuous_backups()
                .table_name(name)
                .point_in_time_recovery_specification(spec)
                .send()
                .await
                .map_err(|e| aws("UpdateContinuousBackups", name, e))?;
        }
    }
    let adopted = !created_by_us;
    if let Some(arn) = &arn {
        let existing = existing_tags;
        // An adopted table is tagged as adopted, never as created: deletion tells them apart.
        let mut wanted = desired.tags.clone();
        if adopted && let Some(uid) = wanted.remove(uid_tag) {
            wanted.insert(crate::plan::tables::TAG_ADOPTED_BY_UID.to_owned(), uid);
        }
        let missing: Vec<(&String, &String)> = wanted
            .iter()
            .filter(|(k, v)| existing.get(k.as_str()) != Some(*v))
            .collect();
        if !missing.is_empty() {
            tag(client, name, arn, missing).await?;
        }
    }
    if marker.is_none() {
        let mut item = marker_key(desired.authority);
        item.insert(
            MARKER_FORMAT_ATTR.into(),
            AttributeValue::S(desired.marker.format.clone()),
        );
        item.insert(
            MARKER_CLUSTER_ATTR.into(),
            AttributeValue::S(desired.marker.cluster.clone()),
        );
        let hash = desired.key_schema.hash.name;
        client
            .put_item()
            .table_name(name)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#h)")
            .expression_attribute_names("#h", hash)
            .send()
            .await
            .map_err(|e| aws("PutItem", name, e))?;
    }
    Ok(AppliedTable {
        name: name.to_owned(),
        authority: desired.authority,
        arn,
        adopted,
    })
}

/// Re-attaches the table a deleted cluster (uid `from`) left behind to this one (`uid`), if its
/// marker and its uid tags name exactly `from`: the marker first, conditionally (still `from`'s,
/// of this authority), then the tags (`from` → `uid`, and who it was taken from). A pass
/// stopped between the two finds the marker this cluster's and the tags `from`'s, and finishes.
/// A table that names `from` nowhere is left to the usual checks; one whose tags name `from`
/// but whose marker does not (or the reverse) is refused, untouched. A table of a cluster in
/// another namespace (its `lake.dev/cluster` tag) is re-attached only with the administrator's
/// consent to adopt in this one (`may_adopt`): a namespace's users never reach another's data.
#[allow(clippy::too_many_arguments)]
async fn reattach(
    client: &Client,
    desired: &DesiredTable,
    arn: &str,
    from: &str,
    uid: &str,
    may_adopt: bool,
    tags: &mut HashMap<String, String>,
) -> Result<(), ApplyError> {
    use crate::plan::tables::{
        TAG_ADOPTED_BY_UID, TAG_CLUSTER, TAG_CLUSTER_UID, TAG_REATTACHED_FROM,
    };
    let name = desired.name.as_str();
    let tagged: Vec<&str> = [TAG_CLUSTER_UID, TAG_ADOPTED_BY_UID]
        .into_iter()
        .filter(|k| tags.get(*k).map(String::as_str) == Some(from))
        .collect();
    let marker = read_marker(client, name, desired.authority).await?;
    let refused = |reason: String| ApplyError::ReattachRefused {
        table: name.to_owned(),
        reason,
    };
    let namespace = |cluster: Option<&String>| {
        cluster
            .and_then(|c| c.split_once('/'))
            .map(|(ns, _)| ns.to_owned())
    };
    let ours = namespace(desired.tags.get(TAG_CLUSTER));
    let theirs = namespace(tags.get(TAG_CLUSTER));
    if !tagged.is_empty() && theirs != ours && !may_adopt {
        return Err(refused(format!(
            "it belonged to a cluster in namespace {:?}; taking over another namespace's tables \
             needs the administrator's consent to adopt in this one (the operator's allowlist)",
            theirs.unwrap_or_default()
        )));
    }
    let format_ok = marker
        .as_ref()
        .is_some_and(|m| m.format == desired.marker.format);
    let marked_from = format_ok && marker.as_ref().is_some_and(|m| m.cluster == from);
    let marked_us = format_ok && marker.as_ref().is_some_and(|m| m.cluster == uid);
    match (tagged.is_empty(), marked_from, marked_us) {
        // Nothing of `from`'s: the usual checks decide.
        (true, false, _) => return Ok(()),
        (true, true, _) => {
            return Err(refused(format!(
                "its marker names cluster {from} but its tags do not: only a table that cluster                  created or adopted is re-attached"
            )));
        }
        (false, false, false) => {
            return Err(refused(format!(
                "its tags name cluster {from} but its marker does not: it is not re-attached"
            )));
        }
        (false, true, _) => {
            let hash = desired.key_schema.hash.name;
            client
                .update_item()
                .table_name(name)
                .set_key(Some(marker_key(desired.authority)))
                .update_expression("SET #c = :new")
                .condition_expression("attribute_exists(#h) AND #c = :old AND #f = :format")
                .expression_attribute_names("#h", hash)
                .expression_attribute_names("#c", MARKER_CLUSTER_ATTR)
                .expression_attribute_names("#f", MARKER_FORMAT_ATTR)
                .expression_attribute_values(":new", AttributeValue::S(uid.to_owned()))
                .expression_attribute_values(":old", AttributeValue::S(from.to_owned()))
                .expression_attribute_values(
                    ":format",
                    AttributeValue::S(desired.marker.format.clone()),
                )
                .send()
                .await
                .map_err(|e| match e.as_service_error() {
                    Some(s) if s.is_conditional_check_failed_exception() => {
                        refused("its marker changed while it was being re-attached".to_owned())
                    }
                    _ => aws("UpdateItem", name, e),
                })?;
            tracing::info!(table = name, from, to = uid, "re-attached a retained table");
        }
        // Marked for this cluster already, tags still `from`'s: a pass stopped between the two.
        (false, false, true) => {}
    }
    let rewritten = tagged
        .iter()
        .map(|k| (k.to_string(), uid.to_owned()))
        .chain([(TAG_REATTACHED_FROM.to_owned(), from.to_owned())])
        .collect::<Vec<_>>();
    tag(client, name, arn, rewritten.iter().map(|(k, v)| (k, v))).await?;
    tags.extend(rewritten);
    Ok(())
}

/// Sets `tags` on table `name` (`arn`): a key it has gets the new value.
async fn tag<'a>(
    client: &Client,
    name: &str,
    arn: &str,
    tags: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), ApplyError> {
    let built = tags
        .into_iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApplyError::Aws {
            operation: "TagResource",
            resource: name.to_owned(),
            detail: e.to_string(),
            source: Some(Box::new(e)),
        })?;
    client
        .tag_resource()
        .resource_arn(arn)
        .set_tags(Some(built))
        .send()
        .await
        .map_err(|e| aws("TagResource", name, e))?;
    Ok(())
}

async fn tags_of(
    client: &Client,
    name: &str,
    arn: &str,
) -> Result<HashMap<String, String>, ApplyError> {
    let tags = client
        .list_tags_of_resource()
        .resource_arn(arn)
        .send()
        .await
        .map_err(|e| aws("ListTagsOfResource", name, e))?;
    Ok(tags
        .tags()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().to_owned()))
        .collect())
}

/// What deletion did with one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableDeletion {
    Deleted,
    /// Not there (deleted already, or never created).
    Absent,
    /// Left in place, and why: it is not this cluster's to delete.
    Kept {
        reason: String,
    },
}

/// Deletion policy `Delete`: deletes `desired`'s table only if it is this cluster's — its
/// marker names this cluster's uid, and this cluster created it (or adopted it and
/// `delete_adopted` says so). Anything else is left untouched: not even its deletion
/// protection is changed.
pub async fn delete_owned(
    client: &Client,
    desired: &DesiredTable,
    delete_adopted: bool,
) -> Result<TableDeletion, ApplyError> {
    let name = desired.name.as_str();
    let Some(table) = describe(client, name).await? else {
        return Ok(TableDeletion::Absent);
    };
    let kept = |reason: String| Ok(TableDeletion::Kept { reason });
    if !schema_matches(
        desired.key_schema,
        table.key_schema(),
        table.attribute_definitions(),
    ) {
        return kept(format!(
            "its key schema is not a lake {} table's",
            desired.authority
        ));
    }
    match read_marker(client, name, desired.authority).await? {
        None => return kept("it holds no lake marker".into()),
        Some(found) if found != desired.marker => {
            tracing::warn!(
                table = name,
                format = %found.format,
                cluster = %found.cluster,
                "a table marked for another cluster or authority is kept"
            );
            return kept("its marker names another cluster or authority".into());
        }
        Some(_) => {}
    }
    let uid_tag = crate::plan::tables::TAG_CLUSTER_UID;
    let created = match table.table_arn() {
        Some(arn) => tags_of(client, name, arn).await?.get(uid_tag) == desired.tags.get(uid_tag),
        None => false,
    };
    if !created && !delete_adopted {
        return kept(
            "this cluster adopted it (it existed before); set spec.tables.deleteAdopted: true \
             to delete adopted tables too"
                .into(),
        );
    }
    delete(client, name).await?;
    Ok(TableDeletion::Deleted)
}

/// Protection off, then delete. A missing table is fine (deleted already). Only for a table
/// [`delete_owned`] has checked.
async fn delete(client: &Client, name: &str) -> Result<(), ApplyError> {
    match client
        .update_table()
        .table_name(name)
        .deletion_protection_enabled(false)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            return Ok(());
        }
        Err(e) => return Err(aws("UpdateTable", name, e)),
    }
    match client.delete_table().table_name(name).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(aws("DeleteTable", name, e)),
    }
}
