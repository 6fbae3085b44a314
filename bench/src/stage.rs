//! Stage bench: upload and download throughput of the lake SDK's stage (multipart put, streamed
//! get) and small-object rates, side by side with boto3 against the same emulator bucket in the
//! same run. Prints a table and SDK/boto3 ratios.
//!
//! Run: `bench/run stage` (release build). Arguments: [MIB] [REPS] [SMALL_COUNT] [SMALL_KIB].
//! The SDK finds its credentials through the AWS default chain; `bench/run` exports the
//! emulator's test credentials.

use std::time::Instant;

use bytes::Bytes;
use lake_client::Stage;
use lake_common::stage::{STAGE_PROTOCOL_VERSION, StageBackend, StageDescriptor};
use lake_testkit::{moto, python, unique};

struct Numbers {
    put_mb_s: f64,
    get_mb_s: f64,
    small_put_per_s: f64,
    small_get_per_s: f64,
}

fn row(engine: &str, n: &Numbers) {
    println!(
        "{engine:<8} {:>10.1} {:>10.1} {:>14.0} {:>14.0}",
        n.put_mb_s, n.get_mb_s, n.small_put_per_s, n.small_get_per_s
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let mib = args.first().copied().unwrap_or(64);
    let reps = args.get(1).copied().unwrap_or(3);
    let small_count = args.get(2).copied().unwrap_or(200);
    let small_kib = args.get(3).copied().unwrap_or(64);
    println!(
        "stage bench on the emulator: {reps} x put+get of a {mib} MiB file, {small_count} x put+get of {small_kib} KiB objects\n"
    );

    let moto = moto();
    let bucket = unique("stage-bench");
    moto.create_bucket(&bucket);
    let prefix = "wh/_stage";
    let descriptor = StageDescriptor {
        protocol_version: STAGE_PROTOCOL_VERSION,
        backend: StageBackend::S3 {
            bucket: bucket.clone(),
            prefix: prefix.into(),
            region: "us-east-1".into(),
            endpoint: Some(moto.endpoint().into()),
        },
    };
    let stage = Stage::from_descriptor(&descriptor)
        .await
        .expect("the SDK's stage (AWS_ACCESS_KEY_ID set? use bench/run stage)");

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.bin");
    let data: Vec<u8> = (0..mib * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).expect("write the bench file");
    let size = data.len() as f64;
    drop(data);

    let back = dir.path().join("back.bin");
    let (mut put, mut get) = (0.0, 0.0);
    for _ in 0..reps {
        let t0 = Instant::now();
        stage
            .put_file("sdk/big.bin", &file, |_| {})
            .await
            .expect("sdk put");
        put += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        stage
            .get_file("sdk/big.bin", &back, |_, _| {})
            .await
            .expect("sdk get");
        get += t0.elapsed().as_secs_f64();
    }
    let body = Bytes::from(vec![7u8; small_kib * 1024]);
    let t0 = Instant::now();
    for i in 0..small_count {
        stage
            .put(&format!("sdk/small/{i}"), body.clone())
            .await
            .expect("sdk small put");
    }
    let small_put = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for i in 0..small_count {
        let got = stage
            .get(&format!("sdk/small/{i}"))
            .await
            .expect("sdk small get");
        assert_eq!(got.len(), body.len());
    }
    let small_get = t0.elapsed().as_secs_f64();
    let sdk = Numbers {
        put_mb_s: size * reps as f64 / put / 1e6,
        get_mb_s: size * reps as f64 / get / 1e6,
        small_put_per_s: small_count as f64 / small_put,
        small_get_per_s: small_count as f64 / small_get,
    };

    let (ok, out, err) = python(&[
        "bench/stage_peer.py",
        moto.endpoint(),
        &bucket,
        prefix,
        &file.display().to_string(),
        &reps.to_string(),
        &small_count.to_string(),
        &(small_kib * 1024).to_string(),
    ]);
    assert!(ok, "boto3 peer failed:\n{out}\n{err}");
    let peer: serde_json::Value = serde_json::from_str(out.trim()).expect("peer JSON");
    let get_f = |k: &str| peer[k].as_f64().expect("a number");
    let boto = Numbers {
        put_mb_s: get_f("put_mb_s"),
        get_mb_s: get_f("get_mb_s"),
        small_put_per_s: get_f("small_put_per_s"),
        small_get_per_s: get_f("small_get_per_s"),
    };

    println!(
        "{:<8} {:>10} {:>10} {:>14} {:>14}",
        "client", "put MB/s", "get MB/s", "small puts/s", "small gets/s"
    );
    row("lake SDK", &sdk);
    row("boto3", &boto);
    println!(
        "\nSDK/boto3 (higher = SDK faster): put x{:.2}, get x{:.2}, small put x{:.2}, small get x{:.2}",
        sdk.put_mb_s / boto.put_mb_s,
        sdk.get_mb_s / boto.get_mb_s,
        sdk.small_put_per_s / boto.small_put_per_s,
        sdk.small_get_per_s / boto.small_get_per_s
    );
}
