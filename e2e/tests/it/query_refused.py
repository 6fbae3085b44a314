"""Query refuses writes, and so do its pod's AWS credentials. usage:
query_refused.py QUERY_URL TOKEN AWS_ENDPOINT ROLE_ARN WEB_IDENTITY_TOKEN MANIFEST_TABLE REGISTRY_TABLE BUCKET PREFIX

Runs after clients.py (which created sales.orders). Exchanges the pod's web-identity token for
the role's credentials exactly as the pod does (STS AssumeRoleWithWebIdentity), then tries writes
directly against DynamoDB and S3. Prints one JSON line: each attempt → "allowed" or the refusal."""

import json
import sys

import adbc_driver_manager
import boto3
import pyarrow as pa
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from lake_e2e import connect

QUERY, TOKEN, ENDPOINT, ROLE, WEB_TOKEN, TABLE, REGISTRY, BUCKET, PREFIX = sys.argv[1:10]
results = {}


def sql(name, statement):
    try:
        with connect(QUERY, TOKEN) as conn, conn.cursor() as cur:
            if statement is None:
                cur.adbc_ingest("orders", pa.table({"id": [1], "amount": [1.0]}), mode="append",
                                db_schema_name="sales")
            else:
                cur.execute(statement)
                cur.fetchall()
        results[name] = "allowed"
    except adbc_driver_manager.Error as e:
        results[name] = str(e)


sql("SQL INSERT", "INSERT INTO sales.orders VALUES (1, 1.0)")
sql("SQL CREATE TABLE", "CREATE TABLE sales.copy AS SELECT * FROM sales.orders")
sql("SQL DROP TABLE", "DROP TABLE sales.orders")
sql("ADBC ingest (DoPut)", None)

config = Config(retries={"max_attempts": 1})
sts = boto3.client("sts", endpoint_url=ENDPOINT, region_name="us-east-1",
                   config=Config(signature_version=UNSIGNED))
creds = sts.assume_role_with_web_identity(RoleArn=ROLE, RoleSessionName="e2e-check",
                                          WebIdentityToken=WEB_TOKEN)["Credentials"]


def client(service):
    return boto3.client(service, endpoint_url=ENDPOINT, region_name="us-east-1", config=config,
                        aws_access_key_id=creds["AccessKeyId"],
                        aws_secret_access_key=creds["SecretAccessKey"],
                        aws_session_token=creds["SessionToken"])


def attempt(name, call):
    try:
        call()
        results[name] = "allowed"
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        results[name] = f"{status} {e.response['Error'].get('Code')}: {e.response['Error'].get('Message')}"


ddb, s3 = client("dynamodb"), client("s3")
key = {"base_uri": {"S": "forged"}, "version": {"N": "1"}}
attempt("dynamodb:PutItem", lambda: ddb.put_item(TableName=TABLE, Item=key))
attempt("dynamodb:DeleteItem", lambda: ddb.delete_item(TableName=TABLE, Key=key))
attempt("dynamodb:Query", lambda: ddb.query(
    TableName=TABLE, KeyConditionExpression="base_uri = :b",
    ExpressionAttributeValues={":b": {"S": "forged"}}))
attempt("dynamodb:GetItem registry", lambda: ddb.get_item(
    TableName=REGISTRY, Key={"pk": {"S": "__lake__/authority"}, "sk": {"S": "0"}}))
attempt("dynamodb:Query registry", lambda: ddb.query(
    TableName=REGISTRY, KeyConditionExpression="pk = :p",
    ExpressionAttributeValues={":p": {"S": "NS#sales"}}))
objects = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/").get("Contents", [])
existing = objects[0]["Key"] if objects else f"{PREFIX}/missing"
attempt("s3:GetObject", lambda: s3.get_object(Bucket=BUCKET, Key=existing)["Body"].read())
attempt("s3:PutObject", lambda: s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/forged.lance", Body=b"x"))
attempt("s3:DeleteObject", lambda: s3.delete_object(Bucket=BUCKET, Key=existing))
print(json.dumps(results))
