"""pylance as a peer of lake's engine: reads or appends a dataset through Lance's own
`s3+ddb://` DynamoDB manifest store.

usage: pylance_peer.py read URI OPTIONS_JSON
       pylance_peer.py append URI OPTIONS_JSON START COUNT
Prints one JSON object: {"version": ..., "rows": ..., "ids": [...]}.
"""

import json
import sys

import lance
import pyarrow as pa


def main() -> None:
    mode, uri, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if mode == "append":
        start, count = int(sys.argv[4]), int(sys.argv[5])
        ids = list(range(start, start + count))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "name": pa.array([f"row-{i}" for i in ids], pa.string()),
            }
        )
        lance.write_dataset(table, uri, mode="append", storage_options=options)
    dataset = lance.dataset(uri, storage_options=options)
    ids = sorted(dataset.to_table(columns=["id"]).column("id").to_pylist())
    print(json.dumps({"version": dataset.version, "rows": dataset.count_rows(), "ids": ids}))


if __name__ == "__main__":
    main()
