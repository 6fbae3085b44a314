//! The MetaStore on a DynamoDB table (any key schema from lake-common's contracts).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, PutRequest, WriteRequest};
use lake_common::schema::{AttributeType, KeySchema};

use super::{
    Condition, Item, Key, MetaRead, MetaStore, Page, QueryRequest, SortKey, StoreError, Value,
    WriteOp,
};

/// DynamoDB's limit on one BatchWriteItem.
const BATCH_LIMIT: usize = 25;

#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    schema: KeySchema,
    describe: String,
}

impl DynamoStore {
    /// A store on `table`, whose key schema must be `schema`. Makes no call: a missing table or a
    /// wrong schema shows on first use, as a typed error.
    pub fn new(client: Client, table: &str, schema: KeySchema) -> Self {
        Self {
            client,
            table: table.to_owned(),
            schema,
            describe: format!("DynamoDB table {table:?}"),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    fn key_attrs(&self, key: &Key) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                self.schema.hash.name.to_owned(),
                AttributeValue::S(key.partition.clone()),
            ),
            (self.schema.range.name.to_owned(), sort_value(&key.sort)),
        ])
    }

    fn to_attrs(&self, item: &Item) -> HashMap<String, AttributeValue> {
        let mut attrs = self.key_attrs(&item.key);
        for (name, value) in &item.attributes {
            attrs.insert(name.clone(), attr_value(value));
        }
        attrs
    }

    fn parse_item(&self, mut attrs: HashMap<String, AttributeValue>) -> Result<Item, StoreError> {
        let described = format!("{attrs:?}");
        let corrupt = |detail: String| StoreError::Corrupt {
            store: self.describe.clone(),
            key: described.clone(),
            detail,
        };
        let partition = match attrs.remove(self.schema.hash.name) {
            Some(AttributeValue::S(s)) => s,
            other => return Err(corrupt(format!("partition key is {other:?}"))),
        };
        let sort = match (
            self.schema.range.attribute_type,
            attrs.remove(self.schema.range.name),
        ) {
            (AttributeType::N, Some(AttributeValue::N(n))) => SortKey::N(
                n.parse()
                    .map_err(|_| corrupt(format!("sort key {n:?} is not a u64")))?,
            ),
            (AttributeType::S, Some(AttributeValue::S(s))) => SortKey::S(s),
            (_, other) => return Err(corrupt(format!("sort key is {other:?}"))),
        };
        let mut item = Item::new(Key { partition, sort });
        for (name, value) in attrs {
            let value = match value {
                AttributeValue::S(s) => Value::S(s),
                AttributeValue::N(n) => Value::N(
                    n.parse()
                        .map_err(|_| corrupt(format!("{name} = {n:?} is not an i64")))?,
                ),
                AttributeValue::B(b) => Value::B(b.into_inner()),
                AttributeValue::Bool(b) => Value::Bool(b),
                other => return Err(corrupt(format!("{name} has unsupported type {other:?}"))),
            };
            item.attributes.insert(name, value);
        }
        Ok(item)
    }

    /// The condition expression of `condition`, its attribute names and values.
    fn condition(&self, condition: Condition) -> Option<ConditionExpression> {
        let hash = ("#h".to_owned(), self.schema.hash.name.to_owned());
        let (expression, names, values) = match condition {
            Condition::Always => return None,
            Condition::NotExists => ("attribute_not_exists(#h)", vec![hash], vec![]),
            Condition::Exists => ("attribute_exists(#h)", vec![hash], vec![]),
            // An item without the attribute is at revision 0.
            Condition::Revision(0) => (
                "attribute_exists(#h) AND (attribute_not_exists(#rev) OR #rev = :rev)",
                vec![hash, ("#rev".to_owned(), super::REVISION_ATTR.to_owned())],
                vec![(":rev".to_owned(), AttributeValue::N("0".to_owned()))],
            ),
            Condition::Revision(revision) => (
                "attribute_exists(#h) AND #rev = :rev",
                vec![hash, ("#rev".to_owned(), super::REVISION_ATTR.to_owned())],
                vec![(":rev".to_owned(), AttributeValue::N(revision.to_string()))],
            ),
        };
        Some(ConditionExpression {
            expression,
            names: names.into_iter().collect(),
            values: values.into_iter().collect(),
        })
    }

    fn error<E>(&self, err: SdkError<E, HttpResponse>, key: Option<&Key>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let store = self.describe.clone();
        let status = err.raw_response().map(|r| r.status().as_u16());
        let code = err.code().unwrap_or_default().to_owned();
        let message = err.message().unwrap_or_default().to_owned();
        match code.as_str() {
            "ConditionalCheckFailedException" => StoreError::ConditionFailed {
                store,
                key: key.cloned().unwrap_or_else(|| Key::new("", SortKey::N(0))),
            },
            "ResourceNotFoundException" => StoreError::Missing { store },
            "ValidationException" if message.contains("key") => StoreError::KeySchemaMismatch {
                store,
                detail: message,
            },
            "AccessDeniedException" | "UnrecognizedClientException" => StoreError::AccessDenied {
                store,
                detail: message,
            },
            // moto answers IAM denials for DynamoDB as an unmodelled XML 403.
            _ if status == Some(403) => StoreError::AccessDenied {
                store,
                detail: if message.is_empty() {
                    "HTTP 403".into()
                } else {
                    message
                },
            },
            _ => StoreError::Backend {
                store,
                source: aws_sdk_dynamodb::error::DisplayErrorContext(err)
                    .to_string()
                    .into(),
            },
        }
    }
}

fn sort_value(sort: &SortKey) -> AttributeValue {
    match sort {
        SortKey::N(n) => AttributeValue::N(n.to_string()),
        SortKey::S(s) => AttributeValue::S(s.clone()),
    }
}

fn attr_value(value: &Value) -> AttributeValue {
    match value {
        Value::S(s) => AttributeValue::S(s.clone()),
        Value::N(n) => AttributeValue::N(n.to_string()),
        Value::B(b) => AttributeValue::B(Blob::new(b.clone())),
        Value::Bool(b) => AttributeValue::Bool(*b),
    }
}

#[async_trait]
impl MetaRead for DynamoStore {
    fn describe(&self) -> &str {
        &self.describe
    }

    async fn get(&self, key: &Key) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key_attrs(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error(e, Some(key)))?;
        out.item.map(|attrs| self.parse_item(attrs)).transpose()
    }

    async fn query(&self, partition: &str, request: &QueryRequest) -> Result<Page, StoreError> {
        let limit = i32::try_from(request.limit.max(1)).unwrap_or(i32::MAX);
        let start = request.start_after.as_ref().map(|sort| {
            self.key_attrs(&Key {
                partition: partition.to_owned(),
                sort: sort.clone(),
            })
        });
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("#h = :h")
            .expression_attribute_names("#h", self.schema.hash.name)
            .expression_attribute_values(":h", AttributeValue::S(partition.to_owned()))
            .consistent_read(true)
            .scan_index_forward(!request.descending)
            .limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| self.error(e, None))?;
        let items = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|attrs| self.parse_item(attrs))
            .collect::<Result<Vec<_>, _>>()?;
        // DynamoDB may return a LastEvaluatedKey with a full last page; normalise to "no more".
        let next = match out.last_evaluated_key {
            Some(_) => items.last().map(|i| i.key.sort.clone()),
            None => None,
        };
        Ok(Page { items, next })
    }
}

#[async_trait]
impl MetaStore for DynamoStore {
    async fn put(&self, item: &Item, condition: Condition) -> Result<(), StoreError> {
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.to_attrs(item)));
        if let Some(c) = self.condition(condition) {
            request = request
                .condition_expression(c.expression)
                .set_expression_attribute_names(Some(c.names))
                .set_expression_attribute_values((!c.values.is_empty()).then_some(c.values));
        }
        request
            .send()
            .await
            .map_err(|e| self.error(e, Some(&item.key)))?;
        Ok(())
    }

    async fn delete(&self, key: &Key, condition: Condition) -> Result<(), StoreError> {
        let mut request = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_attrs(key)));
        if let Some(c) = self.condition(condition) {
            request = request
                .condition_expression(c.expression)
                .set_expression_attribute_names(Some(c.names))
                .set_expression_attribute_values((!c.values.is_empty()).then_some(c.values));
        }
        request.send().await.map_err(|e| self.error(e, Some(key)))?;
        Ok(())
    }

    async fn batch(&self, ops: &[WriteOp]) -> Result<(), StoreError> {
        for chunk in ops.chunks(BATCH_LIMIT) {
            let mut pending: Vec<WriteRequest> = chunk
                .iter()
                .map(|op| self.write_request(op))
                .collect::<Result<_, _>>()?;
            let mut attempt = 0u32;
            while !pending.is_empty() {
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(|e| self.error(e, None))?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(&self.table))
                    .unwrap_or_default();
                if !pending.is_empty() {
                    // Unprocessed items mean throttling: back off before retrying them.
                    attempt += 1;
                    let delay = 50u64.saturating_mul(1 << attempt.min(6));
                    tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                }
            }
        }
        Ok(())
    }
}

/// A DynamoDB condition: its expression, attribute names and values.
struct ConditionExpression {
    expression: &'static str,
    names: std::collections::HashMap<String, String>,
    values: std::collections::HashMap<String, AttributeValue>,
}

impl DynamoStore {
    fn write_request(&self, op: &WriteOp) -> Result<WriteRequest, StoreError> {
        let backend = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Backend {
            store: self.describe.clone(),
            source: Box::new(e),
        };
        Ok(match op {
            WriteOp::Put(item) => WriteRequest::builder()
                .put_request(
                    PutRequest::builder()
                        .set_item(Some(self.to_attrs(item)))
                        .build()
                        .map_err(backend)?,
                )
                .build(),
            WriteOp::Delete(key) => WriteRequest::builder()
                .delete_request(
                    DeleteRequest::builder()
                        .set_key(Some(self.key_attrs(key)))
                        .build()
                        .map_err(backend)?,
                )
                .build(),
        })
    }
}
