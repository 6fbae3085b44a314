"""boto3 side of the migration bench: the same items copied from the legacy table into a new
table with boto3's batch_writer (a Scan, then BatchWriteItem 25 at a time; no conditions, no
checkpoints, no verify). usage: migration_peer.py ENDPOINT SOURCE → JSON line."""

import json
import sys
import time
import uuid

import boto3

endpoint, source = sys.argv[1], sys.argv[2]
kw = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="peer",
          aws_secret_access_key="testing")
ddb = boto3.resource("dynamodb", **kw)
target = ddb.create_table(
    TableName=f"peer-{uuid.uuid4().hex[:10]}", BillingMode="PAY_PER_REQUEST",
    KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"},
               {"AttributeName": "version", "KeyType": "RANGE"}],
    AttributeDefinitions=[{"AttributeName": "base_uri", "AttributeType": "S"},
                          {"AttributeName": "version", "AttributeType": "N"}])
started = time.perf_counter()
copied = 0
with target.batch_writer() as writer:
    kwargs = {}
    while True:
        page = ddb.Table(source).scan(**kwargs)
        for item in page["Items"]:
            writer.put_item(Item=item)
            copied += 1
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
seconds = time.perf_counter() - started
print(json.dumps({"items": copied, "seconds": seconds}))
