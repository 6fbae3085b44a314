"""boto3 side of the stage bench: the same uploads and downloads as the lake SDK, against the same
emulator bucket. boto3 uses its default transfer manager (8 MiB multipart, 10 threads).

usage: stage_peer.py ENDPOINT BUCKET PREFIX FILE REPS SMALL_COUNT SMALL_SIZE → one JSON line.
"""

import json
import os
import sys
import tempfile
import time

import boto3


def main() -> None:
    endpoint, bucket, prefix, path = sys.argv[1:5]
    reps, small_count, small_size = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    size = os.path.getsize(path)
    key = f"{prefix}/boto3/big.bin"
    put = get = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        back = os.path.join(tmp, "back.bin")
        for _ in range(reps):
            t0 = time.perf_counter()
            s3.upload_file(path, bucket, key)
            put += time.perf_counter() - t0
            t0 = time.perf_counter()
            s3.download_file(bucket, key, back)
            get += time.perf_counter() - t0
            assert os.path.getsize(back) == size
    body = os.urandom(small_size)
    t0 = time.perf_counter()
    for i in range(small_count):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/boto3/small/{i}", Body=body)
    small_put = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(small_count):
        assert len(s3.get_object(Bucket=bucket, Key=f"{prefix}/boto3/small/{i}")["Body"].read()) == small_size
    small_get = time.perf_counter() - t0
    print(json.dumps({
        "put_mb_s": size * reps / put / 1e6,
        "get_mb_s": size * reps / get / 1e6,
        "small_put_per_s": small_count / small_put,
        "small_get_per_s": small_count / small_get,
    }))


if __name__ == "__main__":
    main()
