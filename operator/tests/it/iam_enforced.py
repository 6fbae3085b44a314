"""moto with IAM enforcement: credentials holding only the rendered query policy are refused
writes. usage: iam_enforced.py ENDPOINT POLICY.json TABLE BUCKET PREFIX → JSON results.

moto itself authorises DynamoDB requests against "*"; scripts/moto_guard.py makes it use the
table's ARN, as AWS does (the end-to-end tests check table-scoped reads and refusals with it);
the IAM simulator covers every table action.
"""

import json
import sys
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, policy_file, table, bucket, prefix = sys.argv[1:6]
policy = open(policy_file).read()
config = Config(retries={"max_attempts": 1})


def client(service, key="admin", secret="testing"):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret, config=config)


# Set-up while enforcement is off: the table, the bucket with one object, a user holding only the
# query policy.
ddb = client("dynamodb")
ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                 KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"},
                            {"AttributeName": "version", "KeyType": "RANGE"}],
                 AttributeDefinitions=[{"AttributeName": "base_uri", "AttributeType": "S"},
                                       {"AttributeName": "version", "AttributeType": "N"}])
s3 = client("s3")
s3.create_bucket(Bucket=bucket)
s3.put_object(Bucket=bucket, Key=f"{prefix}/sales/orders.lance/data/x.lance", Body=b"data")
iam = client("iam")
iam.create_user(UserName="lake-query-user")
iam.put_user_policy(UserName="lake-query-user", PolicyName="lake", PolicyDocument=policy)
key = iam.create_access_key(UserName="lake-query-user")["AccessKey"]

# Enforcement on, from the next request.
request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                 headers={"Content-Type": "text/plain"})
urllib.request.urlopen(request).read()

as_query = lambda service: client(service, key["AccessKeyId"], key["SecretAccessKey"])
results = {}


def attempt(name, call):
    try:
        call()
        results[name] = "allowed"
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        results[name] = f"{status} {e.response['Error'].get('Code')}: {e.response['Error'].get('Message')}"


attempt("dynamodb:PutItem", lambda: as_query("dynamodb").put_item(
    TableName=table, Item={"base_uri": {"S": "x"}, "version": {"N": "1"}, "path": {"S": "p"}}))
attempt("dynamodb:DeleteItem", lambda: as_query("dynamodb").delete_item(
    TableName=table, Key={"base_uri": {"S": "x"}, "version": {"N": "1"}}))
attempt("s3:PutObject warehouse", lambda: as_query("s3").put_object(
    Bucket=bucket, Key=f"{prefix}/sales/orders.lance/data/y.lance", Body=b"evil"))
attempt("s3:PutObject stage", lambda: as_query("s3").put_object(
    Bucket=bucket, Key=f"{prefix}/_stage/in/a.csv", Body=b"evil"))
attempt("s3:DeleteObject warehouse", lambda: as_query("s3").delete_object(
    Bucket=bucket, Key=f"{prefix}/sales/orders.lance/data/x.lance"))
attempt("s3:GetObject warehouse", lambda: as_query("s3").get_object(
    Bucket=bucket, Key=f"{prefix}/sales/orders.lance/data/x.lance")["Body"].read())
attempt("s3:GetObject other prefix", lambda: as_query("s3").get_object(
    Bucket=bucket, Key="elsewhere/x"))

# Enforcement off again (the server is this test's own, but leave it usable).
request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"1000000", method="POST",
                                 headers={"Content-Type": "text/plain"})
try:
    urllib.request.urlopen(request).read()
except Exception:
    pass
print(json.dumps(results))
