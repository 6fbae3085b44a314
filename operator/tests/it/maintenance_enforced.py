"""moto with IAM enforcement, for the maintenance role (maintenance_role_is_least_privilege).

usage:
  maintenance_enforced.py users ENDPOINT MAINTENANCE.json QUERY.json BUCKET PREFIX
      users holding only the rendered maintenance / query policy (and an auditor holding every
      permission, to read the bucket back), and a user's staged file under PREFIX/_stage/; then
      enforcement on. Prints their keys as JSON.
  maintenance_enforced.py probe ENDPOINT KEYS.json REGISTRY MANIFEST BUCKET OBJECT PREFIX
      what each may not do, attempted (OBJECT: a key of the warehouse that must survive);
      prints {attempt: "allowed" | "<status> <code>: …"}.
  maintenance_enforced.py holding ENDPOINT KEYS.json BUCKET MARKER
      the objects whose bytes hold MARKER, every object read raw with the auditor's key.
"""

import json
import sys
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from lake_checks import objects_holding

config = Config(retries={"max_attempts": 1})


def client(endpoint, service, key="admin", secret="testing"):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret, config=config)


def users(endpoint, maintenance_file, query_file, bucket, prefix):
    client(endpoint, "s3").put_object(Bucket=bucket, Key=f"{prefix}/_stage/in/a.csv", Body=b"a,b")
    iam = client(endpoint, "iam")
    everything = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    keys = {}
    for who, policy in [("maintenance", open(maintenance_file).read()),
                        ("query", open(query_file).read()), ("auditor", everything)]:
        user = f"lake-{who}-user"
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName="lake", PolicyDocument=policy)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        keys[who] = {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(request).read()
    print(json.dumps(keys))


def probe(endpoint, keys_file, registry, manifest, bucket, key, prefix):
    keys = json.load(open(keys_file))
    results = {}

    def as_(who, service):
        return client(endpoint, service, keys[who]["id"], keys[who]["secret"])

    def attempt(name, call):
        try:
            call()
            results[name] = "allowed"
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            error = e.response["Error"]
            results[name] = f"{status} {error.get('Code')}: {error.get('Message')}"

    item = {"pk": {"S": "x"}, "sk": {"S": "y"}}
    row = {"base_uri": {"S": "x"}, "version": {"N": "1"}}
    m = lambda service: as_("maintenance", service)
    q = lambda service: as_("query", service)
    attempt("maintenance dynamodb:PutItem registry",
            lambda: m("dynamodb").put_item(TableName=registry, Item=item))
    attempt("maintenance dynamodb:DeleteItem registry",
            lambda: m("dynamodb").delete_item(TableName=registry, Key=item))
    attempt("maintenance dynamodb:GetItem registry",
            lambda: m("dynamodb").get_item(TableName=registry, Key=item))
    attempt("maintenance dynamodb:Query registry",
            lambda: m("dynamodb").query(TableName=registry, KeyConditionExpression="pk = :p",
                                        ExpressionAttributeValues={":p": {"S": "x"}}))
    attempt("maintenance dynamodb:DeleteTable manifest",
            lambda: m("dynamodb").delete_table(TableName=manifest))
    attempt("maintenance s3:PutObject outside the warehouse",
            lambda: m("s3").put_object(Bucket=bucket, Key="elsewhere/x", Body=b"x"))
    attempt("maintenance s3:DeleteObject outside the warehouse",
            lambda: m("s3").delete_object(Bucket=bucket, Key="elsewhere/x"))
    # A user's staged file (put before the pass): not maintenance's to read or delete.
    staged = f"{prefix}/_stage/in/a.csv"
    attempt("maintenance s3:GetObject stage",
            lambda: m("s3").get_object(Bucket=bucket, Key=staged)["Body"].read())
    attempt("maintenance s3:DeleteObject stage",
            lambda: m("s3").delete_object(Bucket=bucket, Key=staged))
    attempt("query dynamodb:DeleteItem manifest",
            lambda: q("dynamodb").delete_item(TableName=manifest, Key=row))
    attempt("query dynamodb:BatchWriteItem manifest",
            lambda: q("dynamodb").batch_write_item(RequestItems={
                manifest: [{"DeleteRequest": {"Key": row}}]}))
    attempt("query s3:DeleteObject warehouse",
            lambda: q("s3").delete_object(Bucket=bucket, Key=key))

    def delete_objects():
        # A batch is authorised per key: refusals come back inside a 200 response.
        errors = q("s3").delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}]}).get("Errors", [])
        if errors:
            raise ClientError({"Error": {"Code": errors[0].get("Code"), "Message": errors[0].get("Message")},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "DeleteObjects")
    attempt("query s3:DeleteObjects warehouse", delete_objects)
    # The object is still there (read with the auditor's key).
    auditor = client(endpoint, "s3", keys["auditor"]["id"], keys["auditor"]["secret"])
    attempt("the probed object survived", lambda: auditor.head_object(Bucket=bucket, Key=key))
    # A batch is authorised key by key (as S3 does): the key under the warehouse goes, the one
    # outside stays, refused.
    auditor = client(endpoint, "s3", keys["auditor"]["id"], keys["auditor"]["secret"])
    inside, outside = f"{prefix}/probe/inside", "elsewhere/outside"
    for k in (inside, outside):
        auditor.put_object(Bucket=bucket, Key=k, Body=b"x")
    answer = m("s3").delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": inside}, {"Key": outside}]})
    results["maintenance s3:DeleteObjects mixed"] = {
        "deleted": sorted(d["Key"] for d in answer.get("Deleted", [])),
        "refused": sorted(e["Key"] for e in answer.get("Errors", []) if e.get("Code") == "AccessDenied"),
        "left": sorted(k for k in (inside, outside)
                       if auditor.list_objects_v2(Bucket=bucket, Prefix=k).get("KeyCount", 0)),
    }
    attempt("the staged file survived", lambda: client(
        endpoint, "s3", keys["auditor"]["id"], keys["auditor"]["secret"]).head_object(
        Bucket=bucket, Key=staged))
    print(json.dumps(results))


def holding(endpoint, keys_file, bucket, marker):
    """Every object of the bucket, read raw with the auditor's key: {"objects": n, "holding": [keys
    whose bytes contain MARKER]}."""
    keys = json.load(open(keys_file))
    s3 = client(endpoint, "s3", keys["auditor"]["id"], keys["auditor"]["secret"])
    print(json.dumps(objects_holding(s3, bucket, marker)))


if sys.argv[1] == "users":
    users(*sys.argv[2:7])
elif sys.argv[1] == "holding":
    holding(*sys.argv[2:6])
else:
    probe(*sys.argv[2:9])
