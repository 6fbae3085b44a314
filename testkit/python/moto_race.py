"""Conditional puts of one key on the emulator have one winner, as in DynamoDB.

usage: moto_race.py MOTO_GUARD → prints {"keys": n, "several_winners": m}

Starts scripts/moto_guard.py with moto's condition check slowed down (20 ms between reading the
item and writing it: the window a loaded machine opens by chance), then races 6 conditional
PutItems on each of 20 keys."""

import json
import subprocess
import sys
import threading

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

guard = sys.argv[1]
slowed = ("import time, moto.dynamodb.models.table as t; check = t.get_filter_expression; "
          "t.get_filter_expression = lambda *a, **k: (time.sleep(0.02), check(*a, **k))[1]; "
          f"__name__ = '__main__'; exec(compile(open({guard!r}).read(), {guard!r}, 'exec'))")
server = subprocess.Popen([sys.executable, "-c", slowed], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
endpoint = f"http://127.0.0.1:{server.stdout.readline().split()[1]}"
config = Config(max_pool_connections=50, retries={"max_attempts": 1})


def client():
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="race", aws_secret_access_key="race", config=config)


client().create_table(TableName="race", BillingMode="PAY_PER_REQUEST",
                      KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                      AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}])
wins, lock, errors = {}, threading.Lock(), []


def put(key, writer):
    try:
        client().put_item(TableName="race", Item={"k": {"S": key}, "w": {"S": writer}},
                          ConditionExpression="attribute_not_exists(k)")
        with lock:
            wins[key] = wins.get(key, 0) + 1
    except ClientError as e:
        if e.response["Error"]["Code"] != "ConditionalCheckFailedException":
            errors.append(str(e))


threads = [threading.Thread(target=put, args=(f"key{k}", f"w{w}")) for k in range(20) for w in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
server.stdin.close()
server.wait()
if errors:
    raise SystemExit(f"unexpected errors: {errors[:3]}")
print(json.dumps({"keys": len(wins), "several_winners": sum(1 for n in wins.values() if n > 1)}))
