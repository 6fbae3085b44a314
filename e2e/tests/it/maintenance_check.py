"""The maintenance pass, seen from outside. usage:
  maintenance_check.py write METADATA_URL TOKEN MARKER
      a table s.notes whose rows carrying MARKER are inserted, then DELETEd, through metadata
  maintenance_check.py holding AWS_ENDPOINT KEY SECRET BUCKET MARKER
      every object of the bucket read raw: prints {"objects": n, "holding": [keys holding MARKER]}
"""

import json
import sys

import boto3

from lake_checks import objects_holding
from lake_e2e import connect

if sys.argv[1] == "write":
    url, token, marker = sys.argv[2:5]
    with connect(url, token) as conn, conn.cursor() as cur:
        for statement in [
            "CREATE SCHEMA s",
            "CREATE TABLE s.notes (id BIGINT, note VARCHAR)",
            "INSERT INTO s.notes VALUES (1, 'kept')",
            f"INSERT INTO s.notes VALUES (2, '{marker}'), (3, 'kept too')",
            f"DELETE FROM s.notes WHERE note = '{marker}'",
        ]:
            cur.execute(statement)
            cur.fetchall()
    print("written")
else:
    endpoint, key, secret, bucket, marker = sys.argv[2:7]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=key, aws_secret_access_key=secret)
    print(json.dumps(objects_holding(s3, bucket, marker)))
