"""boto3 side of the reconcile bench: per cluster, the AWS changes the operator makes (two tables
with tags and deletion protection, PITR on both, two markers, two inline role policies), made
directly with no observation and no checks. usage: reconcile_peer.py ENDPOINT N → JSON line."""

import json
import sys
import time
import uuid

import boto3

endpoint, n = sys.argv[1], int(sys.argv[2])
kw = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="peer",
          aws_secret_access_key="testing")
ddb, iam = boto3.client("dynamodb", **kw), boto3.client("iam", **kw)
trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
         "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
names = [f"peer-{uuid.uuid4().hex[:10]}" for _ in range(n)]
for name in names:
    for role in (f"{name}-q", f"{name}-m"):
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)

policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
          "Action": ["dynamodb:GetItem", "dynamodb:Query"],
          "Resource": ["arn:aws:dynamodb:us-east-1:123456789012:table/x"]}]})
started = time.perf_counter()
for name in names:
    for table, keys, marker in (
        (f"{name}-registry", (("pk", "S"), ("sk", "S")), {"pk": {"S": "__lake__"}, "sk": {"S": "AUTHORITY"}}),
        (f"{name}-manifests", (("base_uri", "S"), ("version", "N")),
         {"base_uri": {"S": "__lake__/authority"}, "version": {"N": "0"}}),
    ):
        ddb.create_table(
            TableName=table, BillingMode="PAY_PER_REQUEST", DeletionProtectionEnabled=True,
            KeySchema=[{"AttributeName": keys[0][0], "KeyType": "HASH"},
                       {"AttributeName": keys[1][0], "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": k, "AttributeType": t} for k, t in keys],
            Tags=[{"Key": "lake.dev/cluster", "Value": name}])
        ddb.update_continuous_backups(TableName=table,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
        ddb.put_item(TableName=table, Item={**marker, "format": {"S": "x"}, "cluster": {"S": name}})
    for role in (f"{name}-q", f"{name}-m"):
        iam.put_role_policy(RoleName=role, PolicyName="lake", PolicyDocument=policy)
elapsed = time.perf_counter() - started
print(json.dumps({"per_cluster_s": elapsed / n}))
