//! The query role's DynamoDB footprint, recorded by an SDK interceptor: it touches the manifest
//! table only, and only with read actions.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, SharedInterceptor};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::{
    batch_write_item::BatchWriteItemInput, create_table::CreateTableInput,
    delete_item::DeleteItemInput, describe_table::DescribeTableInput, get_item::GetItemInput,
    put_item::PutItemInput, query::QueryInput, scan::ScanInput, update_item::UpdateItemInput,
    update_table::UpdateTableInput,
};
use lake_runtime::aws::ConnectOptions;
use lake_runtime::context::{MetadataContext, QueryContext};

use crate::support::{CloudLake, credentials, seed, table};

/// Records (action, table) of every DynamoDB call.
#[derive(Debug, Default, Clone)]
struct Recorder(Arc<Mutex<Vec<(String, String)>>>);

impl Recorder {
    fn calls(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "lake-test-recorder"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input();
        macro_rules! classify {
            ($($ty:ty => $name:literal, |$i:ident| $table:expr;)*) => {
                $(if let Some($i) = input.downcast_ref::<$ty>() {
                    (String::from($name), $table)
                } else)* {
                    ("unknown".to_owned(), String::new())
                }
            };
        }
        let call = classify! {
            GetItemInput => "GetItem", |i| i.table_name().unwrap_or_default().to_owned();
            QueryInput => "Query", |i| i.table_name().unwrap_or_default().to_owned();
            ScanInput => "Scan", |i| i.table_name().unwrap_or_default().to_owned();
            DescribeTableInput => "DescribeTable", |i| i.table_name().unwrap_or_default().to_owned();
            PutItemInput => "PutItem", |i| i.table_name().unwrap_or_default().to_owned();
            UpdateItemInput => "UpdateItem", |i| i.table_name().unwrap_or_default().to_owned();
            DeleteItemInput => "DeleteItem", |i| i.table_name().unwrap_or_default().to_owned();
            BatchWriteItemInput => "BatchWriteItem", |i| format!("{:?}", i.request_items().map(|m| m.keys().collect::<Vec<_>>()));
            CreateTableInput => "CreateTable", |i| i.table_name().unwrap_or_default().to_owned();
            UpdateTableInput => "UpdateTable", |i| i.table_name().unwrap_or_default().to_owned();
        };
        self.0.lock().unwrap().push(call);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cloud_query_reads_only_the_manifest_table() {
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("sales", "orders");
    seed(&metadata, &t, &[0..10, 10..20]).await;

    let recorder = Recorder::default();
    let recording = ConnectOptions {
        credentials: Some(credentials()),
        dynamodb_interceptors: vec![SharedInterceptor::new(recorder.clone())],
    };
    let query = QueryContext::open(&lake.plan.query(), Some(&lake.cluster), &recording)
        .await
        .unwrap();
    query.engine().list_tables().await.unwrap();
    query.engine().open(&t, None).await.unwrap();
    query.engine().open(&t, Some(1)).await.unwrap();
    query.engine().versions(&t).await.unwrap();

    let calls = recorder.calls();
    assert!(!calls.is_empty(), "the recorder saw nothing");
    for (action, table) in &calls {
        assert!(
            matches!(action.as_str(), "GetItem" | "Query"),
            "query made a {action} call: {calls:?}"
        );
        assert_eq!(
            table,
            &lake.manifest_table(),
            "query touched another table: {calls:?}"
        );
    }
    // And the metadata side, recorded the same way, does use the registry: the recorder works.
    let recorder = Recorder::default();
    let recording = ConnectOptions {
        credentials: Some(credentials()),
        dynamodb_interceptors: vec![SharedInterceptor::new(recorder.clone())],
    };
    MetadataContext::open(&lake.plan.metadata(), Some(&lake.cluster), &recording)
        .await
        .unwrap();
    assert!(
        recorder
            .calls()
            .iter()
            .any(|(_, t)| t == &lake.registry_table())
    );
}
